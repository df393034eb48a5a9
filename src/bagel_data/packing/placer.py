"""Where a drawn sample goes besides the open pack, for one iteration: put first in a new
pack (mandatory and carried samples), kept in the overflow buffer, carried into the next
pack, chosen best-fit, or skipped with a named, counted reason; and what an emitted pack
adds to the worker's counts.

A `Placer` is composed of what it uses (the groups, the draw path, the group choice, the
overflow, the pacer, the state); the loops of `packing/loops.py` decide when each step is
called. The stages it calls keep states of their own (the draw path's cursors,
`groups.DrawState`; the overflow's buffer and carry, `overflow.OverflowState`; the group
choice's, `choosers.py`; the pacer's, `pacing.PaceState`), saved under their keys of the
worker's checkpoint; the placer changes only the worker's totals (`emit`).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Sequence

from ..checkpoint.state import PackState
from ..compat import CompatPolicy
from ..errors import EmptyWorkerError, SkipReason
from ..sample import Draw
from .choosers import GroupChoice
from .config import PackingConfig
from .groups import Drawer, GroupSource
from .overflow import Overflow, OverflowState
from .pacing import PaceState, StagePacer
from .pack import PackBuilder
from .schedule import StepClock
from .strategies import best_subset

# Samples in a row that may add nothing to a pack (every item dropped by CFG dropout) before
# the stream is called stuck. By chance this needs p**items under 1e-3 a thousand times over.
MAX_EMPTY_RUN = 1000


class Placer:
    """One iteration's placement steps over its `state`."""

    def __init__(
        self,
        *,
        groups: Sequence[GroupSource],
        mandatory: Sequence[bool],
        config: PackingConfig,
        policy: CompatPolicy,
        state: PackState,
        draw: Drawer,
        held: OverflowState,
        choice: GroupChoice,
        pace: PaceState,
        clock: StepClock,
        weights: list[float],
        new_pack: Callable[[], PackBuilder],
    ):
        self.groups, self.mandatory, self.config, self.policy = groups, mandatory, config, policy
        self.state, self.draw, self.choice, self.clock, self.weights = state, draw, choice, clock, weights
        self.new_pack = new_pack
        self.overflow = overflow = Overflow(state, held, groups, config, policy, draw.decide)
        self.held = held  # the overflow's state: its buffer is read here at every step
        paces = policy.paces_stage_backlog and config.mix_by == "tokens"
        self.pacer = StagePacer(
            pace, lambda: held.buffer, config, weights, paces, choice, overflow.materialize, overflow.remove
        )
        self.phase_started: int | None = None  # the pack count a phase began at (an empty pack reopens)
        self.empty_run = 0  # samples in a row that added nothing to a pack
        self.pace = pace
        # The group of the next draw, by the group choice at the current weights (`weights` is
        # changed in place as each pack opens). Bound once: it is called for every draw.
        self.choose: Callable[[], int] = functools.partial(choice.choose, weights, state.rng)

    def has_room(self) -> bool:
        """Room in the look-ahead: a backlog from an earlier phase waits beside it
        (`packing/pacing.py`)."""
        return len(self.held.buffer) - self.pace.backlog < self.config.max_buffer_size

    # -- opening and closing a pack ---------------------------------------------------------
    def enter_step(self) -> None:
        """The group weights at the step of the pack being opened. The first pack of a new
        phase starts the token counts that `mix_by="tokens"` steers by afresh, and what waits
        in the buffer becomes the backlog (`packing/pacing.py`)."""
        state = self.state
        self.weights[:] = self.clock.weights(self.clock.step(state.packs))
        if self.clock.phase_changed(state.packs) and self.phase_started != state.packs:
            self.phase_started = state.packs
            self.pacer.start_phase()

    def open_pack(self, pack: PackBuilder) -> None:
        """An empty pack starts with the next fitting sample of each mandatory group, then the
        sample carried over from the last pack."""
        self.enter_step()
        for group, mandatory in enumerate(self.mandatory):
            if mandatory:
                self.put(pack, self.next_fitting(group))
        if self.held.carry is not None:
            self.add_carry(pack)

    def emit(self, pack: PackBuilder) -> dict:
        """The pack as a batch, counted in the worker's totals."""
        state = self.state
        state.packs += 1
        state.tokens += pack.curr
        state.samples.update(where["dataset_name"] for where in pack.data_indexes)
        return pack.to_batch()

    def after_emit(self, draw: Draw) -> None:
        """The sample that made the pack go out: it opens the next pack; in compat mode it is
        dropped, as the reference drops it, but counted."""
        if self.policy.drops_sample_at_emit:
            self.skip(draw, SkipReason.DROPPED_AT_EMIT)
        else:
            self.overflow.carry(draw)

    # -- greedy -----------------------------------------------------------------------------
    def next_item(self, pack: PackBuilder) -> tuple[Draw, bool] | None:
        """The next candidate for the open pack and whether it came from the buffer: the
        oldest buffered sample while the pack is short of `prefer_buffer_before`, else a draw
        from the group `choose` picks. None when it became a counted skip instead (over the
        per-sample budget, or a buffered row that is gone)."""
        cfg = self.config
        if pack.curr < cfg.prefer_buffer_before and self.held.buffer:
            first = self.pacer.first_eligible(pack.curr)  # the oldest, unless a backlog waits its pace
            if first is not None:
                oldest = self.pacer.take(first)
                return None if oldest is None else (oldest, True)
        draw = self.draw(self.choose())
        if draw.full_length > cfg.max_num_tokens_per_sample:
            self.skip(draw, SkipReason.OVER_SAMPLE_BUDGET)
            return None
        self.state.logs[draw.group].used()
        return draw, False

    def add_carry(self, pack: PackBuilder) -> None:
        """Put the carried sample right after the mandatory ones, or skip it, counted, when
        it cannot fit beside them (it would not fit in any later pack either)."""
        draw = self.overflow.take_carry()
        if draw is None:
            return
        if pack.curr + draw.length > self.config.max_num_tokens:
            self.skip(draw, SkipReason.NO_ROOM_BESIDE_MANDATORY)
        else:
            self.put(pack, draw)

    def next_fitting(self, group: int) -> Draw:
        """The next sample of a mandatory group strictly under the per-sample budget."""
        while True:
            draw = self.draw(group)
            if draw.full_length < self.config.max_num_tokens_per_sample:
                self.state.logs[group].used()
                return draw
            self.skip(draw, SkipReason.OVER_SAMPLE_BUDGET)

    # -- best fit ---------------------------------------------------------------------------
    def fill_best(self, pack: PackBuilder) -> None:
        """`pack_strategy="best_fit"`: top the buffer up (a look-ahead bounded by its size),
        put the oldest buffered sample in (so nothing waits more than a buffer's worth of
        packs), then the buffered samples whose total fills the room left best; while that
        takes samples and room is left, top up and choose again (short samples would
        otherwise leave packs a buffer's worth of samples long)."""
        cfg, held = self.config, self.held
        self.top_up()
        # A sample with no room beside this pack's mandatory samples may fit beside a later
        # pack's (smaller) ones: it keeps its place and is skipped, counted, only after it
        # waited a buffer's worth of packs.
        kept: collections.deque = collections.deque()
        backlog = self.pacer.pace.backlog
        for index, draw in enumerate(held.buffer):
            if pack.curr + draw.length > cfg.max_num_tokens:
                draw.waited += 1
                if draw.waited > max(cfg.max_buffer_size, 1):
                    if index < backlog:
                        self.pacer.release(draw)  # counted now, and off again as a skip
                    self.skip(draw, SkipReason.NO_ROOM_BESIDE_MANDATORY)
                    continue
            kept.append(draw)
        held.buffer = kept
        first = self.pacer.first_eligible(pack.curr)  # the oldest, unless a backlog waits its pace
        if first is not None and pack.curr + held.buffer[first].length <= cfg.max_num_tokens:
            self.put(pack, *self.pacer.remove([first]))
        while True:
            eligible = self.pacer.eligible(pack.curr)
            lengths = [held.buffer[index].length for index in eligible]
            chosen = [eligible[k] for k in best_subset(lengths, cfg.max_num_tokens - pack.curr)]
            for draw in self.pacer.remove(chosen):
                self.put(pack, draw)
            if not chosen or pack.curr >= cfg.expected_num_tokens:
                return
            self.top_up()

    def top_up(self) -> None:
        """Draw until the buffer holds `max_buffer_size` samples (at least one); a sample over
        the per-sample budget is a counted skip."""
        cfg = self.config
        while self.pacer.fresh() < max(cfg.max_buffer_size, 1):
            draw = self.draw(self.choose())
            if draw.full_length > cfg.max_num_tokens_per_sample:
                self.skip(draw, SkipReason.OVER_SAMPLE_BUDGET)
            else:
                self.overflow.hold(draw)
        gone = [index for index, draw in enumerate(self.held.buffer) if not self.overflow.materialize(draw)]
        self.pacer.remove(gone)  # rows that became counted skips (a resumed buffer's)

    # -- into the pack, or counted out ------------------------------------------------------
    def put(self, pack: PackBuilder, draw: Draw) -> None:
        """`draw` into `pack`. A sample whose every item CFG dropout dropped adds nothing: it
        is counted by name, and a long run of them (dropout 1.0 on all-CFG samples) raises,
        as an empty worker does, instead of drawing forever without a pack going out."""
        state = self.state
        assert draw.sample is not None  # rebuilt before any use
        before = pack.curr
        if pack.add(draw.sample, None if draw.dropped is None else draw.dropped.items):
            self.empty_run = 0
            # What went in (compat="bagel" drops items only now): the phase's tokens stay
            # part of the stream's, as a checkpoint's check expects (pacing.PaceState).
            self.pacer.packed(draw.group, pack.curr - before)
            return
        state.logs[draw.group].counts[SkipReason.CFG_DROPPED_ALL.value] += 1
        self.empty_run += 1
        if self.empty_run > MAX_EMPTY_RUN:
            cfg = self.config
            raise EmptyWorkerError(
                f"{self.groups[draw.group].name}: the last {self.empty_run} samples lost every item to CFG "
                f"dropout (text/vit/vae_cond_dropout_prob = {cfg.text_cond_dropout_prob}/"
                f"{cfg.vit_cond_dropout_prob}/{cfg.vae_cond_dropout_prob}), so no pack can go "
                "out: lower the dropout, or mark some items enable_cfg=false (an interleaved segment's cfg: false)"
            )

    def skip(self, draw: Draw, reason: SkipReason) -> None:
        cfg = self.config
        self.choice.dropped(draw.group, draw.length)
        budgets = {
            SkipReason.OVER_SAMPLE_BUDGET: f"max_num_tokens_per_sample={cfg.max_num_tokens_per_sample}",
            SkipReason.DROPPED_AT_EMIT: (
                f"the pack (max_num_tokens={cfg.max_num_tokens}) with a full buffer or from the buffer; "
                'dropped as the reference does (compat="bagel")'
            ),
        }.get(reason, f"max_num_tokens={cfg.max_num_tokens} with the mandatory samples")
        where = self.groups[draw.group].where(draw.row_key, draw.cursor)
        # The per-sample budget is checked against the full length (what `validate` predicts,
        # whatever the dropout); the room in a pack against the length packed.
        length = draw.full_length if reason == SkipReason.OVER_SAMPLE_BUDGET else draw.length
        # Counted toward a bound of its own: when no sample fits, this raises instead of looping.
        self.state.logs[draw.group].over_budget(where, f"{length} tokens do not fit {budgets}", reason)
