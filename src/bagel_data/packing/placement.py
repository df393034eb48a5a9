"""Where a drawn sample goes besides the open pack: the overflow buffer, carried into the
next pack, a best-fit subset of the buffer, or a named, counted skip.

`PackedDataset` inherits these from `SamplePlacement`; its mixing loop (`packed_dataset.py`)
decides when each is called. A sample restored from a checkpoint by reference is rebuilt
here (`_materialize`) before any other use.
"""

from __future__ import annotations

import collections
from typing import Any

from ..checkpoint.state import Buffered, PackState, ResumeError
from ..errors import SkipReason
from ..families.base import DistributedIterableDataset
from ..sample import sample_length
from .config import PackingConfig
from .pack import PackBuilder
from .strategies import best_subset


class SamplePlacement:
    """The placement half of `PackedDataset` (which sets these attributes)."""

    config: PackingConfig
    grouped_datasets: list[Any]
    group_names: list[str]
    compat: str | None

    def _after_emit(self, item: Buffered, state: PackState) -> None:
        """The sample that made the pack go out: it opens the next pack; in compat mode it is
        dropped, as the reference drops it, but counted."""
        if self.compat:
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
            pack.add(item.sample)

    def _next_fitting(self, draw, group: int, state: PackState) -> Buffered:
        """The next sample of a mandatory group strictly under the per-sample budget."""
        while True:
            item = draw(group)
            if sample_length(item.sample) < self.config.max_num_tokens_per_sample:
                state.logs[group].used()
                return item
            self._skip(item, state, SkipReason.OVER_SAMPLE_BUDGET)

    def _fill_best(self, pack: PackBuilder, state: PackState, draw_next) -> None:
        """`pack_strategy="best_fit"`: top the buffer up (a look-ahead bounded by its size),
        put the oldest buffered sample in (so nothing waits more than a buffer's worth of
        packs), then the buffered samples whose total fills the room left best."""
        cfg = self.config
        while len(state.buffer) < max(cfg.max_buffer_size, 1):
            item = draw_next()
            if sample_length(item.sample) > cfg.max_num_tokens_per_sample:
                self._skip(item, state, SkipReason.OVER_SAMPLE_BUDGET)
            else:
                state.buffer.append(item)
        state.buffer = collections.deque(item for item in state.buffer if self._materialize(item, state))
        if not state.buffer:
            return
        oldest = state.buffer.popleft()
        if pack.curr + sample_length(oldest.sample) > cfg.max_num_tokens:  # only beside mandatory samples
            self._skip(oldest, state, SkipReason.NO_ROOM_BESIDE_MANDATORY)
        else:
            pack.add(oldest.sample)
        chosen = best_subset([sample_length(item.sample) for item in state.buffer], cfg.max_num_tokens - pack.curr)
        for index in chosen:
            pack.add(state.buffer[index].sample)
        for index in reversed(chosen):
            del state.buffer[index]

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
        row_key = item.sample.get("row_key")
        family = self.grouped_datasets[item.group]
        where = (
            family.row_location(row_key) if row_key else f"{self.group_names[item.group]} cursor {list(item.cursor)}"
        )
        # Counted toward a bound of its own: when no sample fits, this raises instead of looping.
        log.over_budget(where, f"{sample_length(item.sample)} tokens do not fit {budgets}", reason)

    def _materialize(self, item: Buffered, state: PackState) -> bool:
        """Rebuild a sample restored from a checkpoint by reference; False when its row is
        now a counted skip (e.g. its image file is gone)."""
        if item.sample is not None:
            return True
        log = state.logs[item.group]
        before = log.total()
        dataset = self.grouped_datasets[item.group]
        rng_state = item.rng_state if self.compat else None
        item.sample = _pending_sample_at(dataset, item.cursor, rng_state, log)
        if item.sample is None and log.total() == before:
            raise ResumeError(f"{self.group_names[item.group]}: the buffered row at {item.cursor} is no longer valid")
        return item.sample is not None


def pending_samples(dataset, cursor, log):
    """The group's samples with images left as `PendingImage`s when it can (the families
    can): the packer converts them straight into the batch (`media/convert.py`)."""
    if isinstance(dataset, DistributedIterableDataset):
        return dataset.iter_samples(after=cursor, log=log, pending=True)
    return dataset.iter_samples(after=cursor, log=log)


def _pending_sample_at(dataset, cursor, rng_state, log):
    if isinstance(dataset, DistributedIterableDataset):
        return dataset.sample_at(cursor, rng_state=rng_state, log=log, pending=True)
    return dataset.sample_at(cursor, rng_state=rng_state, log=log)
