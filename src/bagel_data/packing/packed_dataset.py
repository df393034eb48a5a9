"""Mixing the groups by weight and emitting packs: the `PackedDataset` of the SPEC.

At the start of each pack, every mandatory group contributes its next sample that fits
the per-sample budget. Then, while the pack is short of `prefer_buffer_before` the
overflow buffer is drained first; otherwise a group is drawn by weight. A sample that would
overflow `max_num_tokens` waits in the buffer; when the buffer is full (or the sample came
from it) the pack is emitted and, unlike the reference, the sample is kept: it opens the
next pack right after the mandatory samples, or, when it cannot fit even beside them, is
skipped with a named, counted reason. The buffer never exceeds `max_buffer_size`.

All randomness (group choice, dropout, timesteps) comes from one generator per worker,
derived from `data_seed`, the rank and the worker id. `state_dict()` / `load_state_dict()`
(torchdata's Stateful protocol) checkpoint the stream after any batch; see `state.py`.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

import numpy as np
import torch

from ..checkpoint.merge import apply_restart, is_elastic, merge_worker_states
from ..checkpoint.state import Buffered, PackState, ResumeError, Topology, check_compatible
from ..errors import SkipLog, SkipReason
from ..families.base import DistributedIterableDataset
from ..sample import sample_length
from ..sources import storage
from .buffers import PadBufferPool
from .config import PackingConfig, SpecialTokens
from .layout import get_flattened_position_ids_extrapolate, get_flattened_position_ids_interpolate
from .pack import PackBuilder


class PackedDataset(torch.utils.data.IterableDataset):
    """Packs the samples of several dataset groups into token-budgeted sequences."""

    def __init__(
        self,
        groups: dict,
        config: PackingConfig,
        special_tokens: dict,
        *,
        weights: dict[str, float],
        mandatory: dict[str, bool],
        local_rank: int = 0,
        world_size: int = 1,
        num_workers: int = 1,
        data_seed: int = 42,
        tokenizer=None,
    ):
        super().__init__()
        self.grouped_datasets = list(groups.values())
        self.group_names = list(groups)
        self.config = config
        self.special_tokens = SpecialTokens(**special_tokens)
        for name, value in special_tokens.items():
            setattr(self, name, value)  # the reference exposes them as attributes
        self.grouped_weights = [float(weights[name]) for name in self.group_names]
        self.is_mandatory = [bool(mandatory[name]) for name in self.group_names]
        self.local_rank, self.world_size, self.num_workers = local_rank, world_size, num_workers
        self.data_seed = data_seed
        self.tokenizer = tokenizer
        self.storage_options = storage.registered()  # travels to spawned workers with the dataset
        self._live: PackState | None = None  # the state of the running iteration
        self._resume: dict | None = None  # a checkpoint to continue from on the next iter()
        if config.interpolate_pos:
            self.get_flattened_position_ids = get_flattened_position_ids_interpolate
        else:
            self.get_flattened_position_ids = get_flattened_position_ids_extrapolate

    # Reference-compatible knobs, read by training scripts.
    def __getattr__(self, name):
        config = self.__dict__.get("config")
        if config is not None and name in PackingConfig.__dataclass_fields__:
            return getattr(config, name)
        raise AttributeError(name)

    def set_epoch(self, seed: int) -> None:
        self.data_seed = seed
        for dataset in self.grouped_datasets:
            dataset.set_epoch(seed)

    # -- state ---------------------------------------------------------------------------
    def _topology(self) -> Topology:
        info = torch.utils.data.get_worker_info()
        worker_id, num_workers = (0, 0) if info is None else (info.id, info.num_workers)
        return Topology(self.local_rank, self.world_size, worker_id, num_workers)

    def _fresh_state(self, generation: int = 0) -> PackState:
        topology = self._topology()
        key = [self.data_seed & 0xFFFFFFFF, topology.rank, topology.worker_id, 0x9ACC]
        key += [generation] if generation else []  # each elastic restart draws afresh
        logs = [
            SkipLog(name, dataset.strict, dataset.max_consecutive_failures)
            for name, dataset in zip(self.group_names, self.grouped_datasets)
        ]
        # Without a checkpoint, each group starts where the reference's data_status says.
        cursors = [dataset.resume_cursor(topology.worker_id) for dataset in self.grouped_datasets]
        rng = np.random.default_rng(np.random.SeedSequence(key))
        return PackState(topology, self.data_seed, self.group_unit_counts(), rng, cursors, collections.deque(), logs)

    def group_unit_counts(self) -> list[int]:
        """How many units (files, row groups or lines) each group shards."""
        return [len(getattr(dataset, "epoch_units", ())) for dataset in self.grouped_datasets]

    def state_dict(self) -> dict:
        """Checkpoint of this worker's stream (torchdata's Stateful protocol)."""
        if self._live is not None:
            return self._live.to_dict(self.group_names)
        if self._resume is not None:
            return dict(self._resume)
        return self._fresh_state().to_dict(self.group_names)

    def load_state_dict(self, state_dict: dict) -> None:
        """Continue from a checkpoint on the next `iter()`; checked against the topology then.

        An elastic checkpoint (from `load_elastic_state`) loads into any topology.
        """
        self._resume = state_dict

    def load_elastic_state(self, worker_states: list[dict]) -> dict:
        """Continue the checkpoints of *all* workers of all ranks of a run with another world
        size or worker count; returns the merged checkpoint (the same on every new rank).

        Call it before building the loader, with the dataset states of every old worker
        (`bagel_data.loader.worker_dataset_states` of each rank's loader state); see
        docs/elastic.md.
        """
        self._resume = merge_worker_states(self, worker_states)  # checked here, not in a worker
        return self._resume

    def _start_state(self) -> PackState:
        """The state the next iteration starts from: fresh, a checkpoint, or a restart plan."""
        saved, self._resume = self._resume, None
        if saved is None:
            apply_restart(self, None)
            return self._fresh_state()
        if not is_elastic(saved):
            state = self._fresh_state()
            state.restore(saved, self.group_names)
            apply_restart(self, state.restart)
            return state
        check_compatible(saved, self.data_seed, self.group_names, self.group_unit_counts())
        apply_restart(self, saved["restart"])
        state = self._fresh_state(saved["restart"]["generation"])
        state.cursors = [None] * len(self.group_names)  # each group starts with its inherited samples
        state.restart, state.history = saved["restart"], saved["history"]
        return state

    @property
    def stats(self) -> dict:
        """Packs, tokens and samples emitted, and rows skipped by reason, in this process."""
        state = self._live
        if state is None:
            return {"packs": 0, "tokens": 0, "samples": {}, "skips": {}, "history": None}
        return {
            "packs": state.packs,
            "tokens": state.tokens,
            "samples": dict(state.samples),
            "skips": {name: log.as_dict() for name, log in zip(self.group_names, state.logs)},
            "history": state.history,  # totals before the last elastic restart, if any
        }

    # -- the mixing loop -------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict]:
        storage.register_all(self.storage_options)
        state = self._start_state()
        self._live = state
        cfg = self.config
        cumulative = _cumulative_shares(self.grouped_weights)
        sources = [
            _pending_samples(dataset, cursor, log)
            for dataset, cursor, log in zip(self.grouped_datasets, state.cursors, state.logs)
        ]

        def draw(group: int) -> Buffered:
            cursor, sample = next(sources[group])
            state.cursors[group] = cursor
            return Buffered(group, cursor, sample)

        pad_pool = PadBufferPool()  # this iteration's padded_images buffers, reused once freed

        def new_pack() -> PackBuilder:
            return PackBuilder(cfg, self.special_tokens, state.rng, self.get_flattened_position_ids, pad_pool)

        def emit(pack: PackBuilder) -> dict:
            state.packs += 1
            state.tokens += pack.curr
            state.samples.update(where["dataset_name"] for where in pack.data_indexes)
            return pack.to_batch()

        pack = new_pack()
        while True:
            if pack.is_empty():
                for group in range(len(sources)):
                    if self.is_mandatory[group]:
                        pack.add(self._next_fitting(draw, group, state).sample)
                if state.carry is not None:
                    self._add_carry(pack, state)
            if pack.curr < cfg.prefer_buffer_before and state.buffer:
                item, from_buffer = state.buffer.popleft(), True
                self._materialize(item)
            else:
                item, from_buffer = draw(_choose_group(cumulative, state.rng.random())), False
                if sample_length(item.sample) > cfg.max_num_tokens_per_sample:
                    self._skip(item, state, SkipReason.OVER_SAMPLE_BUDGET)
                    continue
            if pack.curr + sample_length(item.sample) > cfg.max_num_tokens:
                if len(state.buffer) < cfg.max_buffer_size and not from_buffer:
                    state.buffer.append(item)
                else:
                    # Every state change happens before the yield, so a checkpoint taken
                    # while the batch is out describes exactly what comes next.
                    batch = emit(pack)
                    pack = new_pack()
                    state.carry = item  # the reference drops it; it opens the next pack
                    yield batch
                continue
            pack.add(item.sample)
            if pack.curr >= cfg.expected_num_tokens:
                batch = emit(pack)
                pack = new_pack()
                yield batch

    def _add_carry(self, pack: PackBuilder, state: PackState) -> None:
        """Put the carried sample right after the mandatory ones, or skip it, counted, when
        it cannot fit beside them (it would not fit in any later pack either)."""
        item, state.carry = state.carry, None
        self._materialize(item)
        if pack.curr + sample_length(item.sample) > self.config.max_num_tokens:
            self._skip(item, state, SkipReason.NO_ROOM_BESIDE_MANDATORY)
        else:
            pack.add(item.sample)

    def _next_fitting(self, draw, group: int, state: PackState) -> Buffered:
        """The next sample of a mandatory group strictly under the per-sample budget."""
        while True:
            item = draw(group)
            if sample_length(item.sample) < self.config.max_num_tokens_per_sample:
                return item
            self._skip(item, state, SkipReason.OVER_SAMPLE_BUDGET)

    def _skip(self, item: Buffered, state: PackState, reason: SkipReason) -> None:
        cfg = self.config
        budgets = (
            f"max_num_tokens_per_sample={cfg.max_num_tokens_per_sample}"
            if reason is SkipReason.OVER_SAMPLE_BUDGET
            else f"max_num_tokens={cfg.max_num_tokens} with the mandatory samples"
        )
        log = state.logs[item.group]
        where = f"{self.group_names[item.group]} cursor {list(item.cursor)}"
        log.skip(reason, where, f"{sample_length(item.sample)} tokens do not fit {budgets}")
        log.ok()  # one long sample says nothing about the rows after it

    def _materialize(self, item: Buffered) -> None:
        """Rebuild a sample restored from a checkpoint by reference."""
        if item.sample is not None:
            return
        item.sample = _pending_sample_at(self.grouped_datasets[item.group], item.cursor)
        if item.sample is None:
            raise ResumeError(f"{self.group_names[item.group]}: the buffered row at {item.cursor} is no longer valid")


def _pending_samples(dataset, cursor, log):
    """The group's samples with images left as `PendingImage`s when it can (the families
    can): the packer converts them straight into the batch (`media/convert.py`)."""
    if isinstance(dataset, DistributedIterableDataset):
        return dataset.iter_samples(after=cursor, log=log, pending=True)
    return dataset.iter_samples(after=cursor, log=log)


def _pending_sample_at(dataset, cursor):
    if isinstance(dataset, DistributedIterableDataset):
        return dataset.sample_at(cursor, pending=True)
    return dataset.sample_at(cursor)


def _cumulative_shares(weights: list[float]) -> list[float]:
    total = sum(weights)
    running, shares = 0.0, []
    for weight in weights:
        running += weight
        shares.append(running / total)
    return shares


def _choose_group(cumulative: list[float], u: float) -> int:
    for group, share in enumerate(cumulative):
        if u < share:
            return group
    return 0
