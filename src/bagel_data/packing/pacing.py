"""A mixture schedule's change point: what waits in the overflow buffer does not hold the
new mixture back (default mode, `mix_by: tokens`).

At the first pack of a new phase, the samples waiting in the buffer were drawn for the old
weights. They become the phase's *backlog*: the oldest `PackState.backlog` entries of the
buffer (new draws are appended and taking entries keeps the order, so they stay in front).

- None is dropped: each is packed at the pace its group's new target allows. While a group
  has samples in the backlog, a pack may take its buffered samples, oldest first (the
  backlog's before any drawn since), only while the group's tokens packed in this phase stay
  within its target share of the phase's tokens, this pack counted at `max_num_tokens`. A
  group whose weight drops to 0 drains at `DRAIN_FLOOR` of the tokens.
- The backlog does not count toward `max_buffer_size`: the look-ahead of fresh draws keeps
  its size beside it (best fit draws into it, greedy holds overflow in it), so the buffer
  holds at most twice `max_buffer_size` samples while a backlog drains.
- The token counts the group choice steers by (`PackState.group_tokens`: fresh draws) count
  a backlog sample when it leaves the backlog: a group whose backlog is being packed at its
  pace is drawn less meanwhile, and the others fill the rest of each pack at their targets
  from the first pack on. `PackState.packed_tokens` counts what each group packed in the
  phase (what the pace is measured against).

`compat="bagel"` keeps the reference's order and `mix_by: samples` its weighted draw;
neither paces (`enabled` is False): every buffered sample may be taken at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from ..checkpoint.state import PackState
from ..sample import Draw
from .config import PackingConfig

# The share of the phase's tokens a group at weight 0 may still fill with its backlog: its
# waiting samples go out within a few points of its target of 0, and never stay for good.
DRAIN_FLOOR = 0.02


class StagePacer:
    """Which buffered samples the open pack may take, and the backlog's bookkeeping."""

    def __init__(
        self,
        state: PackState,
        config: PackingConfig,
        weights: Sequence[float],
        enabled: bool,
        materialize: Callable[[Draw], bool],
    ):
        self.state, self.config, self.weights, self.enabled = state, config, weights, enabled
        self.materialize = materialize  # the overflow's rebuild of a restored draw

    def start_phase(self) -> None:
        """The first pack of a new phase: the counts start afresh; what waits is the backlog."""
        state = self.state
        state.group_tokens[:] = [0] * len(state.group_tokens)
        state.packed_tokens[:] = [0] * len(state.packed_tokens)
        if self.enabled:
            state.backlog = min(len(state.buffer), max(self.config.max_buffer_size, 1))

    def fresh(self) -> int:
        """Buffered samples outside the backlog: the look-ahead `max_buffer_size` bounds."""
        return len(self.state.buffer) - self.state.backlog

    def eligible(self, pack_tokens: int) -> list[int]:
        """Indices (ascending) of the buffered samples the open pack (`pack_tokens` in it so
        far) may take: of a group with samples in the backlog, its oldest ones within what its
        pace allows (the backlog first: it is older); of any other group, every one."""
        state = self.state
        if not self.enabled or state.backlog == 0:
            return list(range(len(state.buffer)))
        self._rebuild()
        paced = {draw.group for draw in itertools.islice(state.buffer, state.backlog)}
        room = self._allowances(pack_tokens)
        chosen = []
        for index, draw in enumerate(state.buffer):
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
        if not self.state.buffer:
            return None
        if not self.enabled or self.state.backlog == 0:
            return 0
        eligible = self.eligible(pack_tokens)
        return eligible[0] if eligible else None

    def remove(self, indices: Sequence[int]) -> list[Draw]:
        """Take the (rebuilt) buffered samples at `indices` out of the buffer, to be packed;
        returns them in index order. Those of the backlog now count for their group."""
        state = self.state
        taken = [state.buffer[index] for index in sorted(indices)]
        for index in sorted(indices, reverse=True):
            del state.buffer[index]
        for draw in taken[: sum(1 for index in indices if index < state.backlog)]:
            leave_backlog(state, draw)
        return taken

    def _allowances(self, pack_tokens: int) -> list[float]:
        state = self.state
        total_weight = sum(self.weights) or 1.0
        closed = sum(state.packed_tokens) - pack_tokens  # the phase's packs already out
        horizon = closed + self.config.max_num_tokens
        return [
            max(weight / total_weight, DRAIN_FLOOR) * horizon - packed
            for weight, packed in zip(self.weights, state.packed_tokens)
        ]

    def _rebuild(self) -> None:
        """Rebuild restored buffered samples (their lengths are read); one whose row became a
        counted skip leaves the buffer, counted nowhere else."""
        state = self.state
        gone = [index for index, draw in enumerate(state.buffer) if not self.materialize(draw)]
        for index in reversed(gone):
            del state.buffer[index]
        state.backlog -= sum(1 for index in gone if index < state.backlog)


def leave_backlog(state: PackState, draw: Draw) -> None:
    """`draw` leaves the backlog to be packed (or skipped, which takes its tokens off again):
    its tokens count for its group from now on. Drawn in an earlier phase, it was not
    counted in this one's draws, so the group choice steers by it only once it is packed."""
    state.backlog -= 1
    state.group_tokens[draw.group] += draw.length
