"""Mixing the groups by weight and emitting packs: the `PackedDataset` of the SPEC.

At the start of each pack, every mandatory group contributes its next sample that fits
the per-sample budget. Then, while the pack is short of `prefer_buffer_before` the
overflow buffer is drained first; otherwise a group is drawn by weight. A sample that would
overflow `max_num_tokens` waits in the buffer; when the buffer is full (or the sample came
from it) the pack is emitted and, unlike the reference, the sample is kept for the next
pack instead of being dropped.

All randomness (group choice, dropout, timesteps) comes from one generator per worker,
derived from `data_seed`, the rank and the worker id.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

import numpy as np
import torch

from ..errors import SkipLog, SkipReason
from ..sample import sample_length
from .layout import get_flattened_position_ids_extrapolate, get_flattened_position_ids_interpolate
from .pack import PackBuilder, PackingConfig, SpecialTokens


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
        self.stats = PackStats()
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

    def _worker_id(self) -> int:
        info = torch.utils.data.get_worker_info()
        return 0 if info is None else info.id

    def make_rng(self) -> np.random.Generator:
        key = [self.data_seed & 0xFFFFFFFF, self.local_rank, self._worker_id(), 0x9ACC]
        return np.random.default_rng(np.random.SeedSequence(key))

    def __iter__(self) -> Iterator[dict]:
        rng = self.make_rng()
        cumulative = _cumulative_shares(self.grouped_weights)
        sources = [iter(dataset) for dataset in self.grouped_datasets]
        cfg = self.config
        self.stats = PackStats()
        budget_log = SkipLog("packer")
        buffer: collections.deque = collections.deque()

        def new_pack() -> PackBuilder:
            return PackBuilder(cfg, self.special_tokens, rng, self.get_flattened_position_ids)

        def emit(pack: PackBuilder) -> dict:
            self.stats.record(pack)
            return pack.to_batch()

        pack = new_pack()
        while True:
            if pack.is_empty():
                for group, source in enumerate(sources):
                    if self.is_mandatory[group]:
                        pack.add(self._next_fitting(source, budget_log))
            if pack.curr < cfg.prefer_buffer_before and buffer:
                sample, from_buffer = buffer.popleft(), True
            else:
                group = _choose_group(cumulative, rng.random())
                sample, from_buffer = next(sources[group]), False
                if sample_length(sample) > cfg.max_num_tokens_per_sample:
                    self._skip_over_budget(sample, budget_log)
                    continue
            if pack.curr + sample_length(sample) > cfg.max_num_tokens:
                if len(buffer) < cfg.max_buffer_size and not from_buffer:
                    buffer.append(sample)
                else:
                    yield emit(pack)
                    pack = new_pack()
                    buffer.appendleft(sample)  # kept for the next pack, never dropped
                continue
            pack.add(sample)
            if pack.curr >= cfg.expected_num_tokens:
                yield emit(pack)
                pack = new_pack()

    def _next_fitting(self, source, log: SkipLog) -> dict:
        """The next sample of a mandatory group strictly under the per-sample budget."""
        while True:
            sample = next(source)
            if sample_length(sample) < self.config.max_num_tokens_per_sample:
                return sample
            self._skip_over_budget(sample, log)

    def _skip_over_budget(self, sample: dict, log: SkipLog) -> None:
        where = sample["data_indexes"]
        log.skip(
            SkipReason.OVER_SAMPLE_BUDGET,
            f"{where['dataset_name']} worker {where['worker_id']} position {where['data_indexes']}",
            f"{sample_length(sample)} tokens > max_num_tokens_per_sample={self.config.max_num_tokens_per_sample}",
        )
        log.ok()  # one long sample says nothing about the next
        self.stats.skips[where["dataset_name"]][SkipReason.OVER_SAMPLE_BUDGET.value] += 1


class PackStats:
    """What this worker has emitted and skipped, for summaries."""

    def __init__(self) -> None:
        self.packs = 0
        self.tokens = 0
        self.samples: collections.Counter = collections.Counter()
        self.skips: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def record(self, pack: PackBuilder) -> None:
        self.packs += 1
        self.tokens += pack.curr
        for where in pack.data_indexes:
            self.samples[where["dataset_name"]] += 1


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
