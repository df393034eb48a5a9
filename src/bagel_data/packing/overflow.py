"""The samples waiting outside the open pack: the overflow buffer and the carried sample.

Both are this stage's own state (`OverflowState`), saved under `stages.overflow` of the
worker's checkpoint by reference: group and cursor (which of them are a phase's backlog is
the pacer's state, `packing/pacing.py`). This is their one home: holding and taking them, and, after a resume, fetching
their rows at once through each family's read-ahead (`prefetch`) and rebuilding them
(`materialize`), ahead on a few threads where the family allows it (`packing/rebuild.py`).
A restored draw is rebuilt before any other use; its dropout is decided again, from its own
generator, so it is the decision it had when first drawn.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence

from ..checkpoint.checks import check_waiting
from ..checkpoint.state import OVERFLOW, BufferEntry, PackState, ResumeError
from ..compat import CompatPolicy
from ..sample import Draw
from .config import PackingConfig
from .groups import GroupSource
from .rebuild import rebuild_ahead, rebuild_threads, take_rebuilt


class OverflowState:
    """The overflow's state: the buffered samples (oldest first) and the carried one."""

    def __init__(self, group_names: Sequence[str]):
        self.group_names = list(group_names)
        self.buffer: collections.deque[Draw] = collections.deque()
        self.carry: Draw | None = None

    def state_dict(self) -> dict:
        names = self.group_names
        carry = self.carry
        return {
            "buffer": [BufferEntry.of(draw, names).to_saved() for draw in self.buffer],
            "carry": None if carry is None else BufferEntry.of(carry, names).to_saved(),
        }

    def load_state_dict(self, saved: Mapping, worker: Mapping) -> None:
        """Load `saved` (entries of any saved form, `BufferEntry.read`), checked: known
        groups, well-formed cursors, no row twice (`checks.check_waiting`)."""
        names = self.group_names
        check_waiting(f"stages.{OVERFLOW}", saved.get("buffer"), saved.get("carry"), names)
        self.buffer = collections.deque(BufferEntry.read(raw).draw(names) for raw in saved["buffer"])
        carry = saved.get("carry")
        self.carry = None if carry is None else BufferEntry.read(carry).draw(names)


class Overflow:
    """The buffer and the carry of one iteration (`own`: its `OverflowState`)."""

    def __init__(
        self,
        state: PackState,
        own: OverflowState,
        groups: Sequence[GroupSource],
        config: PackingConfig,
        policy: CompatPolicy,
        decide: Callable[[Draw], None],
    ):
        self.state, self.own, self.groups, self.config, self.policy = state, own, groups, config, policy
        self.decide = decide  # the draw path's dropout decision (`Drawer.decide`)

    # -- the buffer and the carry -----------------------------------------------------------
    def hold(self, draw: Draw) -> None:
        self.own.buffer.append(draw)

    def carry(self, draw: Draw) -> None:
        """`draw` opens the next pack (it made the last one go out)."""
        self.own.carry = draw

    def take_carry(self) -> Draw | None:
        """The carried sample, rebuilt; None when there is none or it became a counted skip."""
        draw, self.own.carry = self.own.carry, None
        return draw if draw is not None and self.materialize(draw) else None

    def remove(self, index: int) -> Draw:
        """The buffered sample at `index` (0: the oldest), out of the buffer as it is (the
        pacer takes it: `StagePacer.take`)."""
        buffer = self.own.buffer
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
        own, config = self.own, self.config
        restored = [*own.buffer, *([own.carry] if own.carry is not None else [])]
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
