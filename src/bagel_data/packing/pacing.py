"""A mixture schedule's change point: what waits in the overflow buffer does not hold the
new mixture back (default mode, `mix_by: tokens`).

At the first pack of a new phase, the samples waiting in the buffer were drawn for the old
weights. They become the phase's *backlog*: the oldest `PaceState.backlog` entries of the
buffer (new draws are appended and taking entries keeps the order, so they stay in front).

- None is dropped: each is packed at the pace its group's new target allows. While a group
  has samples in the backlog, a pack may take its buffered samples, oldest first (the
  backlog's before any drawn since), only while the group's tokens packed in this phase stay
  within its target share of the phase's tokens, this pack counted at `max_num_tokens`. A
  group whose weight drops to 0 drains at `DRAIN_FLOOR` of the tokens.
- The backlog does not count toward `max_buffer_size`: the look-ahead of fresh draws keeps
  its size beside it (best fit draws into it, greedy holds overflow in it), so the buffer
  holds at most twice `max_buffer_size` samples while a backlog drains.
- The group choice (`packing/choosers.py`) hears of a backlog sample when it leaves the
  backlog (`released`), and of it again if it then becomes a skip (`dropped`): a group whose
  backlog is being packed at its pace is drawn less meanwhile, and the others fill the rest
  of each pack at their targets from the first pack on. `PaceState.packed_tokens` counts
  what each group packed in the phase (what the pace is measured against).
- The pacer's state (`PaceState`: the backlog and the phase's packed tokens) is its own,
  saved under `stages.pace` of the worker's checkpoint.

`compat="bagel"` keeps the reference's order and `mix_by: samples` its weighted draw;
neither paces (`enabled` is False): every buffered sample may be taken at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

from ..checkpoint.state import OVERFLOW
from ..errors import ResumeError, shown
from ..sample import Draw
from .choosers import GroupChoice, group_counts
from .config import PackingConfig

# The share of the phase's tokens a group at weight 0 may still fill with its backlog: its
# waiting samples go out within a few points of its target of 0, and never stay for good.
DRAIN_FLOOR = 0.02


class PaceState:
    """The pacer's state: how many of the oldest buffered samples are the backlog, and the
    tokens each group packed in the phase."""

    def __init__(self, group_names: Sequence[str], max_buffer_size: int):
        self.group_names, self.max_buffer = list(group_names), max(max_buffer_size, 1)
        self.backlog = 0
        self.packed_tokens = [0] * len(self.group_names)

    def state_dict(self) -> dict:
        return {"backlog": self.backlog, "packed_tokens": dict(zip(self.group_names, self.packed_tokens))}

    def load_state_dict(self, saved: Mapping, worker: Mapping) -> None:
        """Load `saved`, checked against the rest of the worker's checkpoint (`worker`): the
        backlog is the front of its buffer, the buffer's fresh part within the look-ahead,
        and the phase's tokens part of the stream's."""
        # The overflow loaded (and checked) its part first: the packer makes it before this stage.
        buffered, tokens = len(worker["stages"][OVERFLOW]["buffer"]), worker["tokens"]
        backlog = saved.get("backlog", 0)
        if (
            isinstance(backlog, bool)
            or not isinstance(backlog, int)
            or not 0 <= backlog <= min(buffered, self.max_buffer)
        ):
            raise ResumeError(
                f"checkpoint field stages.pace.backlog = {shown(backlog, 40)}: an int from 0 to the buffer's "
                f"length ({buffered}), at most max_buffer_size={self.max_buffer}"
            )
        if buffered - backlog > self.max_buffer:
            raise ResumeError(
                f"checkpoint field stages.{OVERFLOW}.buffer = {buffered} entries: at most max_buffer_size={self.max_buffer} beside "
                f"the backlog of {backlog}"
            )
        packed = group_counts("stages.pace.packed_tokens", saved.get("packed_tokens"), self.group_names, False)
        if sum(packed) > tokens:
            raise ResumeError(
                f"checkpoint field stages.pace.packed_tokens = {sum(packed)} in all: the tokens packed in this "
                f"phase are part of the checkpoint's tokens ({tokens}); resume from an unedited checkpoint"
            )
        self.backlog, self.packed_tokens = backlog, packed


class StagePacer:
    """Which buffered samples the open pack may take, and the backlog's bookkeeping."""

    def __init__(
        self,
        pace: PaceState,
        buffer_of: Callable[[], Sequence[Draw]],
        config: PackingConfig,
        weights: Sequence[float],
        enabled: bool,
        choice: GroupChoice,
        materialize: Callable[[Draw], bool],
        remove: Callable[[int], Draw],
    ):
        self.pace, self.buffer_of, self.config, self.weights, self.enabled = pace, buffer_of, config, weights, enabled
        self.choice = choice
        self.materialize = materialize  # the overflow's rebuild of a restored draw
        self.remove_at = remove  # the overflow's: take the buffered draw at an index out

    def start_phase(self) -> None:
        """The first pack of a new phase: the counts start afresh; what waits is the backlog."""
        pace = self.pace
        self.choice.new_phase()
        pace.packed_tokens = [0] * len(pace.packed_tokens)
        if self.enabled:
            pace.backlog = min(len(self.buffer_of()), pace.max_buffer)

    def fresh(self) -> int:
        """Buffered samples outside the backlog: the look-ahead `max_buffer_size` bounds."""
        return len(self.buffer_of()) - self.pace.backlog

    def packed(self, group: int, tokens: int) -> None:
        """`tokens` of `group` went into a pack."""
        self.pace.packed_tokens[group] += tokens

    def release(self, draw: Draw) -> None:
        """`draw` leaves the backlog to be packed (or skipped: the group choice then hears of
        it as `dropped`). Drawn in an earlier phase, it was not counted in this one's draws,
        so the group choice steers by it only from now on."""
        self.pace.backlog -= 1
        self.choice.released(draw.group, draw.length)

    def take(self, index: int) -> Draw | None:
        """The buffered sample at `index` (0: the oldest), rebuilt; None when it became a
        counted skip."""
        from_backlog = index < self.pace.backlog
        draw = self.remove_at(index)
        if from_backlog:  # rebuilt already: its pace was checked on its length
            self.release(draw)
        return draw if self.materialize(draw) else None

    def eligible(self, pack_tokens: int) -> list[int]:
        """Indices (ascending) of the buffered samples the open pack (`pack_tokens` in it so
        far) may take: of a group with samples in the backlog, its oldest ones within what its
        pace allows (the backlog first: it is older); of any other group, every one."""
        buffer = self.buffer_of()
        if not self.enabled or self.pace.backlog == 0:
            return list(range(len(buffer)))
        self._rebuild()
        buffer = self.buffer_of()
        paced = {draw.group for draw in itertools.islice(buffer, self.pace.backlog)}
        room = self._allowances(pack_tokens)
        chosen = []
        for index, draw in enumerate(buffer):
            if draw.group not in paced:
                chosen.append(index)
            elif draw.length <= room[draw.group]:
                room[draw.group] -= draw.length
                chosen.append(index)
            else:
                room[draw.group] = -1.0  # oldest first: a later one of this group waits too
        return chosen

    def first_eligible(self, pack_tokens: int) -> int | None:
        """The index of the oldest buffered sample the open pack may take; None if none."""
        if not self.buffer_of():
            return None
        if not self.enabled or self.pace.backlog == 0:
            return 0
        eligible = self.eligible(pack_tokens)
        return eligible[0] if eligible else None

    def remove(self, indices: Sequence[int]) -> list[Draw]:
        """Take the (rebuilt) buffered samples at `indices` out of the buffer, to be packed;
        returns them in index order. Those of the backlog are released."""
        in_backlog = sum(1 for index in indices if index < self.pace.backlog)
        taken = [self.remove_at(index) for index in sorted(indices, reverse=True)][::-1]
        for draw in taken[:in_backlog]:
            self.release(draw)
        return taken

    def _allowances(self, pack_tokens: int) -> list[float]:
        packed_tokens = self.pace.packed_tokens
        total_weight = sum(self.weights) or 1.0
        closed = sum(packed_tokens) - pack_tokens  # the phase's packs already out
        horizon = closed + self.config.max_num_tokens
        return [
            max(weight / total_weight, DRAIN_FLOOR) * horizon - packed
            for weight, packed in zip(self.weights, packed_tokens)
        ]

    def _rebuild(self) -> None:
        """Rebuild restored buffered samples (their lengths are read); one whose row became a
        counted skip leaves the buffer, counted nowhere else."""
        buffer = self.buffer_of()
        gone = [index for index, draw in enumerate(buffer) if not self.materialize(draw)]
        for index in reversed(gone):
            self.remove_at(index)
        self.pace.backlog -= sum(1 for index in gone if index < self.pace.backlog)
