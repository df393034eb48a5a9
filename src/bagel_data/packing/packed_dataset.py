"""Mixing the groups by weight and emitting packs: the `PackedDataset` of docs/packing.md.

At the start of each pack, every mandatory group contributes its next sample that fits
the per-sample budget. Then, while the pack is short of `prefer_buffer_before` the
overflow buffer is drained first; otherwise a group is drawn by weight. A sample that would
overflow `max_num_tokens` waits in the buffer; when the buffer is full (or the sample came
from it) the pack is emitted and, unlike the reference, the sample is kept: it opens the
next pack right after the mandatory samples, or, when it cannot fit even beside them, is
skipped with a named, counted reason. The buffer never exceeds `max_buffer_size`.

All randomness (group choice, dropout, timesteps) comes from one generator per worker,
derived from `data_seed`, the rank and the worker id (in compat mode, from the policy's
reference stream). `state_dict()` / `load_state_dict()`
(torchdata's Stateful protocol) checkpoint the stream after any batch: `stream_state.py`
(where a stream starts from) and `checkpoint/state.py` (what a checkpoint holds). Where a
sample goes besides the open pack (buffer, carry, best fit, skip) is `placement.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import torch

from ..checkpoint.state import PackState
from ..compat import CompatPolicy
from ..sample import sample_length
from ..schema.settings import SETTING_NAMES
from ..sources import storage
from ..torch_support import check_torch
from .buffers import PadBufferPool
from .config import PackingConfig, SpecialTokens
from .layout import get_flattened_position_ids_extrapolate, get_flattened_position_ids_interpolate
from .pack import PackBuilder
from .parts import Assembled
from .placement import SamplePlacement
from .schedule import StepClock, as_schedule
from .strategies import group_chooser
from .stream_state import StreamState


class PackedDataset(StreamState, SamplePlacement, torch.utils.data.IterableDataset):
    """Packs the samples of several dataset groups into token-budgeted sequences."""

    # The pool each iteration lends `padded_images` buffers from: a hook, so the benchmark
    # can measure against fresh zero-filled buffers (`bagel_data.bench.fast.FreshZeroPool`).
    pad_pool_factory: Callable[[], PadBufferPool] = PadBufferPool

    def __init__(
        self,
        parts: Assembled,
        special_tokens: dict,
        *,
        num_workers: int,
        tokenizer=None,
        global_seed: int | None = None,
    ):
        """A packed dataset over the checked parts an entrance assembled (`assembly.assemble`).

        The entrances (`make_bagel_multimodal_dataset`, the reference-shaped
        `PackedDataset(data_config, ...)` of `bagel_data.nemo.packing`, `BagelDatasetConfig.build`
        and run configs) all come through `assembly.build_packed_dataset`, which makes these
        parts from one `Settings`. `global_seed`, when given, is mixed into the packer's own
        generator (never the global ones).
        """
        self._setup(parts, special_tokens, num_workers=num_workers, tokenizer=tokenizer, global_seed=global_seed)

    @classmethod
    def from_parts(
        cls, parts: Assembled, special_tokens: dict, *, num_workers: int, tokenizer=None, global_seed=None
    ) -> PackedDataset:
        """An instance of `cls` (a subclass with another constructor, too) over `parts`."""
        packed = cls.__new__(cls)
        packed._setup(parts, special_tokens, num_workers=num_workers, tokenizer=tokenizer, global_seed=global_seed)
        return packed

    @classmethod
    def from_groups(
        cls,
        groups: dict,
        config: PackingConfig,
        special_tokens: dict,
        *,
        weights: dict[str, float],
        mandatory: dict[str, bool],
        local_rank: int,
        world_size: int,
        num_workers: int,
        data_seed: int,
        tokenizer=None,
        global_seed: int | None = None,
        policy: CompatPolicy | None = None,
    ) -> PackedDataset:
        """A packed dataset over family datasets built elsewhere (`groups`: name -> dataset),
        for tests and tools that build their own groups; `policy` (default: the default
        mode) must be the one those groups were built with."""
        parts = Assembled(
            groups,
            weights,
            mandatory,
            dataclasses.replace(config, data_seed=data_seed),
            local_rank,
            world_size,
            CompatPolicy() if policy is None else policy,
        )
        return cls.from_parts(
            parts, special_tokens, num_workers=num_workers, tokenizer=tokenizer, global_seed=global_seed
        )

    def _setup(
        self, parts: Assembled, special_tokens: dict, *, num_workers: int, tokenizer, global_seed: int | None
    ) -> None:
        super().__init__()
        self.grouped_datasets = list(parts.datasets.values())
        self.group_names = list(parts.datasets)
        self.config = parts.config
        self.policy = parts.policy  # the entrance's compat decision, shared with every group
        self.data_config = None  # the reference-shaped constructor keeps the config it read
        self.special_tokens = SpecialTokens(**special_tokens)
        for name, value in special_tokens.items():
            setattr(self, name, value)  # the reference exposes them as attributes
        # A weight may be a schedule (schema/weights.py); `grouped_weights`, the reference's
        # attribute, holds the weights at step 0.
        self.weight_schedules = [as_schedule(parts.weights[name]) for name in self.group_names]
        self.grouped_weights = [schedule.at(0) for schedule in self.weight_schedules]
        self.is_mandatory = [bool(parts.mandatory[name]) for name in self.group_names]
        self.local_rank, self.world_size, self.num_workers = parts.local_rank, parts.world_size, num_workers
        self.data_seed = parts.config.data_seed
        self.global_seed = _check_global_seed(global_seed)
        self.tokenizer = tokenizer
        self.storage_options = storage.registered()  # travels to spawned workers with the dataset
        self._live: PackState | None = None  # the state of the running iteration
        self._resume: dict | None = None  # a checkpoint to continue from on the next iter()
        if parts.config.interpolate_pos:
            self.get_flattened_position_ids = get_flattened_position_ids_interpolate
        else:
            self.get_flattened_position_ids = get_flattened_position_ids_extrapolate

    @property
    def compat(self) -> str | None:
        """The reference's attribute: None (the default mode) or "bagel" (`self.policy`)."""
        return self.policy.mode

    # Reference-compatible knobs, read by training scripts.
    def __getattr__(self, name):
        config = self.__dict__.get("config")
        if config is not None and name in SETTING_NAMES:
            return getattr(config, name)
        raise AttributeError(name)

    def set_epoch(self, seed: int) -> None:
        # The settings check the seed (its range in compat mode) and make numpy's ints plain.
        self.config = dataclasses.replace(self.config, data_seed=seed)  # the settings say what runs
        self.data_seed = seed = self.config.data_seed
        for dataset in self.grouped_datasets:
            dataset.set_epoch(seed)
            # The epoch order is made here, once, so DataLoader workers inherit it rather
            # than each shuffling its own copy (families make it lazily otherwise).
            getattr(dataset, "epoch_units", None)

    # -- the mixing loop -------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict]:
        check_torch()  # a torch without the internals used below fails here, naming them
        storage.register_all(self.storage_options)
        state = self._start_state()
        self._live = state
        cfg = self.config
        clock = StepClock(self.weight_schedules, state.topology.worker_id, state.topology.num_workers, state.step_base)
        weights = clock.weights(clock.step(state.packs))  # updated in place as each pack opens
        choose = group_chooser(cfg.mix_by, weights, state.group_tokens, state.rng)
        draw = self._drawer(state)
        stop_rebuilding = self._prefetch_restored(state)  # a resumed buffer's rows, fetched at once
        try:
            yield from self._packs(state, clock, weights, choose, draw)
        finally:
            stop_rebuilding()  # a closed stream's buffered rows that no thread has started

    def _packs(self, state: PackState, clock: StepClock, weights: list[float], choose, draw) -> Iterator[dict]:
        cfg = self.config
        pad_pool = self.pad_pool_factory()  # this iteration's padded_images buffers, reused once freed

        def new_pack() -> PackBuilder:
            return PackBuilder(
                cfg, self.special_tokens, state.rng, self.get_flattened_position_ids, pad_pool, self.policy.reference
            )

        # One loop on purpose: it follows the reference's control flow branch for branch, so
        # the random draws come in the reference's order (tests/conformance pin it).
        pack = new_pack()
        while True:
            if pack.is_empty():
                self._enter_step(clock, weights, state)
                self._open_pack(pack, draw, state)
            if cfg.pack_strategy == "best_fit":
                self._fill_best(pack, state, lambda: draw(choose()))
                if pack.is_empty():  # every chosen sample lost all its items to dropout (counted)
                    continue
                batch = self._emit(pack, state)
                pack = new_pack()
                yield batch
                continue
            taken = self._next_item(pack, state, draw, choose)
            if taken is None:  # a counted skip
                continue
            item, from_buffer = taken
            if pack.curr + sample_length(item.sample) > cfg.max_num_tokens:
                if len(state.buffer) < cfg.max_buffer_size and not from_buffer:
                    state.buffer.append(item)
                else:
                    # Every state change happens before the yield, so a checkpoint taken
                    # while the batch is out describes exactly what comes next.
                    batch = self._emit(pack, state)
                    pack = new_pack()
                    self._after_emit(item, state)
                    yield batch
                continue
            self._put(pack, item, state)
            if pack.curr >= cfg.expected_num_tokens:
                batch = self._emit(pack, state)
                pack = new_pack()
                yield batch

    @staticmethod
    def _enter_step(clock: StepClock, weights: list[float], state: PackState) -> None:
        """The group weights at the step of the pack being opened. The first pack of a new
        phase starts the token counts that `mix_by="tokens"` steers by afresh."""
        if clock.phase_changed(state.packs):
            state.group_tokens[:] = [0] * len(state.group_tokens)
        weights[:] = clock.weights(clock.step(state.packs))


def _check_global_seed(global_seed):
    if global_seed is None:
        return None
    if isinstance(global_seed, bool) or not isinstance(global_seed, int) or global_seed < 0:
        from ..errors import ConfigError

        raise ConfigError("global_seed", global_seed, "must be None or a non-negative int")
    return int(global_seed)
