"""The samples waiting outside the open pack: the overflow buffer and the carried sample.

Both live in the worker's `PackState`, beside the cursors: where the stream is (a checkpoint
saves them by reference: group and cursor; which of them are a phase's backlog is the
pacer's state, `packing/pacing.py`). This is their one home: holding and taking them, and, after a resume, fetching
their rows at once through each family's read-ahead (`prefetch`) and rebuilding them
(`materialize`), ahead on a few threads where the family allows it (`packing/rebuild.py`).
A restored draw is rebuilt before any other use; its dropout is decided again, from its own
generator, so it is the decision it had when first drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..checkpoint.state import PackState, ResumeError
from ..compat import CompatPolicy
from ..sample import Draw
from .config import PackingConfig
from .groups import GroupSource
from .rebuild import rebuild_ahead, rebuild_threads, take_rebuilt


class Overflow:
    """The buffer (oldest first) and the carry of one iteration's `state`."""

    def __init__(
        self,
        state: PackState,
        groups: Sequence[GroupSource],
        config: PackingConfig,
        policy: CompatPolicy,
        decide: Callable[[Draw], None],
    ):
        self.state, self.groups, self.config, self.policy = state, groups, config, policy
        self.decide = decide  # the draw path's dropout decision (`Drawer.decide`)

    # -- the buffer and the carry -----------------------------------------------------------
    def hold(self, draw: Draw) -> None:
        self.state.buffer.append(draw)

    def carry(self, draw: Draw) -> None:
        """`draw` opens the next pack (it made the last one go out)."""
        self.state.carry = draw

    def take_carry(self) -> Draw | None:
        """The carried sample, rebuilt; None when there is none or it became a counted skip."""
        draw, self.state.carry = self.state.carry, None
        return draw if draw is not None and self.materialize(draw) else None

    def remove(self, index: int) -> Draw:
        """The buffered sample at `index` (0: the oldest), out of the buffer as it is (the
        pacer takes it: `StagePacer.take`)."""
        buffer = self.state.buffer
        if index == 0:
            return buffer.popleft()
        draw = buffer[index]
        del buffer[index]
        return draw

    # -- after a resume ---------------------------------------------------------------------
    def prefetch(self) -> Callable[[], None]:
        """Fetch the rows of the restored buffer (and carry) at once, grouped by file, through
        each family's read-ahead, and rebuild them from these reads on a few threads
        (`rebuild_threads`); with `read_ahead_bytes: 0` both stay inline. Returns what stops
        the rebuild when the stream closes."""
        state, config = self.state, self.config
        restored = [*state.buffer, *([state.carry] if state.carry is not None else [])]
        waiting: dict[int, list[tuple]] = {}
        for draw in restored:
            if draw.sample is None:
                waiting.setdefault(draw.group, []).append(draw.cursor)
        for group, cursors in waiting.items():
            self.groups[group].prefetch(cursors, config.resume_read_ahead)
        if not waiting or config.resume_read_ahead <= 0 or self.policy.replays_shared_stream:
            return lambda: None  # compat="bagel" rebuilds by replaying the one shared stream: in order
        parallel = [draw for draw in restored if self.groups[draw.group].parallel_rebuild]
        threads = rebuild_threads() if config.rebuild_threads is None else config.rebuild_threads
        return rebuild_ahead(parallel, [group.dataset for group in self.groups], threads)

    def materialize(self, draw: Draw) -> bool:
        """Rebuild a draw restored from a checkpoint by reference; False when its row is
        now a counted skip (e.g. its image file is gone)."""
        if draw.sample is not None:
            return True
        log = self.state.logs[draw.group]
        before = log.total()
        group = self.groups[draw.group]
        draw.sample = take_rebuilt(draw)  # rebuilt ahead on another thread (resume), if it was
        if draw.sample is None:
            rng_state = draw.rng_state if self.policy.replays_shared_stream else None
            draw.sample = group.sample_at(draw.cursor, rng_state, log)
        if draw.sample is None:
            if log.total() == before:
                raise ResumeError(f"{group.name}: the buffered row at {draw.cursor} is no longer valid")
            return False
        self.decide(draw)  # the same decision as when drawn
        return True
