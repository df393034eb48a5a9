"""Where a sample comes from and where it goes besides the open pack: drawn from its group
or taken from the overflow buffer, put first in a new pack (mandatory and carried samples),
kept in the buffer, carried into the next pack, chosen best-fit, or skipped with a named,
counted reason; and what an emitted pack adds to the worker's counts.

`PackedDataset` inherits these from `SamplePlacement`; its mixing loop (`packed_dataset.py`)
decides when each is called. A sample restored from a checkpoint by reference is rebuilt
here (`_materialize`) before any other use.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from ..checkpoint.state import Buffered, PackState, ResumeError
from ..compat import CompatPolicy
from ..errors import EmptyWorkerError, SkipReason
from ..families.base import DistributedIterableDataset
from ..sample import full_length, sample_length
from .config import PackingConfig
from .dropout import any_dropout, decide_dropout, dropout_rng
from .pack import PackBuilder
from .rebuild import take_rebuilt
from .strategies import best_subset

# Samples in a row that may add nothing to a pack (every item dropped by CFG dropout) before
# the stream is called stuck. By chance this needs p**items under 1e-3 a thousand times over.
MAX_EMPTY_RUN = 1000


class SamplePlacement:
    """The placement half of `PackedDataset` (which sets these attributes)."""

    config: PackingConfig
    grouped_datasets: list[Any]
    group_names: list[str]
    is_mandatory: list[bool]
    policy: CompatPolicy
    data_seed: int

    def _drawer(self, state: PackState) -> Callable[[int], Buffered]:
        """`draw(group)`: the group's next sample, its cursor recorded and its tokens counted
        (taken back if it is skipped)."""
        ahead = self.config.read_ahead_bytes
        sources = [
            _pending_samples(dataset, cursor, log, ahead)
            for dataset, cursor, log in zip(self.grouped_datasets, state.cursors, state.logs)
        ]

        def draw(group: int) -> Buffered:
            cursor, sample = next(sources[group])
            while not sample["sequence_plan"]:  # a zero-length sample has no place in a pack
                state.cursors[group] = cursor
                where = self._where(group, sample.get("row_key"), cursor)
                state.logs[group].skip(SkipReason.SAMPLE_INVALID, where, "the sample has no items (zero length)")
                cursor, sample = next(sources[group])
            state.cursors[group] = cursor
            self._decide_dropout(group, cursor, sample)
            state.group_tokens[group] += sample_length(sample)
            return Buffered(group, cursor, sample, sample.get("compat_rng_state"))

        return draw

    def _decide_dropout(self, group: int, cursor: tuple, sample: dict) -> None:
        """Default mode: the sample's CFG dropout, decided now from its own generator, so
        that every length the packer reads from here on is the one it packs
        (`packing/dropout.py`). compat="bagel" draws it while packing, as the reference."""
        if self.policy.reference:
            return
        rng = None
        if any_dropout(self.config):
            rng = dropout_rng(self.grouped_datasets[group], self.group_names[group], self.data_seed, cursor, sample)
        decide_dropout(sample, self.config, rng)

    def _open_pack(self, pack: PackBuilder, draw: Callable[[int], Buffered], state: PackState) -> None:
        """An empty pack starts with the next fitting sample of each mandatory group, then the
        sample carried over from the last pack."""
        for group, mandatory in enumerate(self.is_mandatory):
            if mandatory:
                self._put(pack, self._next_fitting(draw, group, state), state)
        if state.carry is not None:
            self._add_carry(pack, state)

    def _next_item(
        self, pack: PackBuilder, state: PackState, draw: Callable[[int], Buffered], choose: Callable[[], int]
    ) -> tuple[Buffered, bool] | None:
        """The next candidate for the open pack and whether it came from the buffer: the
        oldest buffered sample while the pack is short of `prefer_buffer_before`, else a draw
        from the group `choose` picks. None when it became a counted skip instead (over the
        per-sample budget, or a buffered row that is gone)."""
        cfg = self.config
        if pack.curr < cfg.prefer_buffer_before and state.buffer:
            item = state.buffer.popleft()
            return (item, True) if self._materialize(item, state) else None
        item = draw(choose())
        if full_length(item.sample) > cfg.max_num_tokens_per_sample:
            self._skip(item, state, SkipReason.OVER_SAMPLE_BUDGET)
            return None
        state.logs[item.group].used()
        return item, False

    def _emit(self, pack: PackBuilder, state: PackState) -> dict:
        """The pack as a batch, counted in the worker's totals."""
        state.packs += 1
        state.tokens += pack.curr
        state.samples.update(where["dataset_name"] for where in pack.data_indexes)
        return pack.to_batch()

    def _after_emit(self, item: Buffered, state: PackState) -> None:
        """The sample that made the pack go out: it opens the next pack; in compat mode it is
        dropped, as the reference drops it, but counted."""
        if self.policy.drops_sample_at_emit:
            self._skip(item, state, SkipReason.DROPPED_AT_EMIT)
        else:
            state.carry = item

    def _add_carry(self, pack: PackBuilder, state: PackState) -> None:
        """Put the carried sample right after the mandatory ones, or skip it, counted, when
        it cannot fit beside them (it would not fit in any later pack either)."""
        item, state.carry = state.carry, None
        assert item is not None  # called only while a sample is carried
        if not self._materialize(item, state):
            return
        if pack.curr + sample_length(item.sample) > self.config.max_num_tokens:
            self._skip(item, state, SkipReason.NO_ROOM_BESIDE_MANDATORY)
        else:
            self._put(pack, item, state)

    def _next_fitting(self, draw, group: int, state: PackState) -> Buffered:
        """The next sample of a mandatory group strictly under the per-sample budget."""
        while True:
            item = draw(group)
            if full_length(item.sample) < self.config.max_num_tokens_per_sample:
                state.logs[group].used()
                return item
            self._skip(item, state, SkipReason.OVER_SAMPLE_BUDGET)

    def _fill_best(self, pack: PackBuilder, state: PackState, draw_next) -> None:
        """`pack_strategy="best_fit"`: top the buffer up (a look-ahead bounded by its size),
        put the oldest buffered sample in (so nothing waits more than a buffer's worth of
        packs), then the buffered samples whose total fills the room left best; while that
        takes samples and room is left, top up and choose again (short samples would
        otherwise leave packs a buffer's worth of samples long)."""
        cfg = self.config
        self._top_up(state, draw_next)
        # A sample with no room beside this pack's mandatory samples may fit beside a later
        # pack's (smaller) ones: it keeps its place and is skipped, counted, only after it
        # waited a buffer's worth of packs.
        kept: collections.deque = collections.deque()
        for item in state.buffer:
            if pack.curr + sample_length(item.sample) > cfg.max_num_tokens:
                item.waited += 1
                if item.waited > max(cfg.max_buffer_size, 1):
                    self._skip(item, state, SkipReason.NO_ROOM_BESIDE_MANDATORY)
                    continue
            kept.append(item)
        state.buffer = kept
        if state.buffer and pack.curr + sample_length(state.buffer[0].sample) <= cfg.max_num_tokens:
            self._put(pack, state.buffer.popleft(), state)
        while True:
            chosen = best_subset([sample_length(item.sample) for item in state.buffer], cfg.max_num_tokens - pack.curr)
            for index in chosen:
                self._put(pack, state.buffer[index], state)
            for index in reversed(chosen):
                del state.buffer[index]
            if not chosen or pack.curr >= cfg.expected_num_tokens:
                return
            self._top_up(state, draw_next)

    def _top_up(self, state: PackState, draw_next) -> None:
        """Draw until the buffer holds `max_buffer_size` samples (at least one); a sample over
        the per-sample budget is a counted skip."""
        cfg = self.config
        while len(state.buffer) < max(cfg.max_buffer_size, 1):
            item = draw_next()
            if full_length(item.sample) > cfg.max_num_tokens_per_sample:
                self._skip(item, state, SkipReason.OVER_SAMPLE_BUDGET)
            else:
                state.buffer.append(item)
        state.buffer = collections.deque(item for item in state.buffer if self._materialize(item, state))

    def _put(self, pack: PackBuilder, item: Buffered, state: PackState) -> None:
        """`item` into `pack`. A sample whose every item CFG dropout dropped adds nothing: it
        is counted by name, and a long run of them (dropout 1.0 on all-CFG samples) raises,
        as an empty worker does, instead of drawing forever without a pack going out."""
        if pack.add(item.sample):
            state.empty_run = 0
            return
        state.logs[item.group].counts[SkipReason.CFG_DROPPED_ALL.value] += 1
        state.empty_run += 1
        if state.empty_run > MAX_EMPTY_RUN:
            raise EmptyWorkerError(
                f"{self.group_names[item.group]}: the last {state.empty_run} samples lost every item to CFG "
                f"dropout (text/vit/vae_cond_dropout_prob = {self.config.text_cond_dropout_prob}/"
                f"{self.config.vit_cond_dropout_prob}/{self.config.vae_cond_dropout_prob}), so no pack can go "
                "out: lower the dropout, or mark some items enable_cfg=false (an interleaved segment's cfg: false)"
            )

    def _where(self, group: int, row_key, cursor) -> str:
        """A sample's row as messages name it: file and row, else its group and cursor."""
        family = self.grouped_datasets[group]
        if row_key and hasattr(family, "row_location"):
            return family.row_location(row_key)
        return f"{self.group_names[group]} cursor {list(cursor or ())}"

    def _skip(self, item: Buffered, state: PackState, reason: SkipReason) -> None:
        cfg = self.config
        state.group_tokens[item.group] -= sample_length(item.sample)
        budgets = {
            SkipReason.OVER_SAMPLE_BUDGET: f"max_num_tokens_per_sample={cfg.max_num_tokens_per_sample}",
            SkipReason.DROPPED_AT_EMIT: (
                f"the pack (max_num_tokens={cfg.max_num_tokens}) with a full buffer or from the buffer; "
                'dropped as the reference does (compat="bagel")'
            ),
        }.get(reason, f"max_num_tokens={cfg.max_num_tokens} with the mandatory samples")
        log = state.logs[item.group]
        where = self._where(item.group, item.sample.get("row_key"), item.cursor)
        # The per-sample budget is checked against the full length (what `validate` predicts,
        # whatever the dropout); the room in a pack against the length packed.
        length = full_length(item.sample) if reason == SkipReason.OVER_SAMPLE_BUDGET else sample_length(item.sample)
        # Counted toward a bound of its own: when no sample fits, this raises instead of looping.
        log.over_budget(where, f"{length} tokens do not fit {budgets}", reason)

    def _materialize(self, item: Buffered, state: PackState) -> bool:
        """Rebuild a sample restored from a checkpoint by reference; False when its row is
        now a counted skip (e.g. its image file is gone)."""
        if item.sample is not None:
            return True
        log = state.logs[item.group]
        before = log.total()
        dataset = self.grouped_datasets[item.group]
        rng_state = item.rng_state if self.policy.reference else None
        item.sample = take_rebuilt(item)  # rebuilt ahead on another thread (resume), if it was
        if item.sample is None:
            item.sample = _pending_sample_at(dataset, item.cursor, rng_state, log)
        if item.sample is None and log.total() == before:
            raise ResumeError(f"{self.group_names[item.group]}: the buffered row at {item.cursor} is no longer valid")
        if item.sample is not None:
            self._decide_dropout(item.group, item.cursor, item.sample)  # the same decision as when drawn
        return item.sample is not None


def _pending_samples(dataset, cursor, log, read_ahead: int):
    """The group's samples with images left as `PendingImage`s when it can (the families
    can): the packer converts them straight into the batch (`media/convert.py`). The
    families also read ahead of the stream (`read_ahead` bytes; 0: inline)."""
    if isinstance(dataset, DistributedIterableDataset):
        return dataset.iter_samples(after=cursor, log=log, pending=True, read_ahead=read_ahead)
    return dataset.iter_samples(after=cursor, log=log)


def _pending_sample_at(dataset, cursor, rng_state, log):
    if isinstance(dataset, DistributedIterableDataset):
        return dataset.sample_at(cursor, rng_state=rng_state, log=log, pending=True)
    return dataset.sample_at(cursor, rng_state=rng_state, log=log)
