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
(torchdata's Stateful protocol) checkpoint the stream after any batch: `stream_state.py`
(where a stream starts from) and `checkpoint/state.py` (what a checkpoint holds). Where a
sample goes besides the open pack (buffer, carry, best fit, skip) is `placement.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ..checkpoint.state import PackState
from ..compat import check_compat
from ..sample import sample_length
from ..sources import storage
from .buffers import PadBufferPool
from .config import PackingConfig, SpecialTokens
from .layout import get_flattened_position_ids_extrapolate, get_flattened_position_ids_interpolate
from .pack import PackBuilder
from .placement import SamplePlacement
from .schedule import StepClock, as_schedule
from .strategies import group_chooser
from .stream_state import StreamState


class PackedDataset(StreamState, SamplePlacement, torch.utils.data.IterableDataset):
    """Packs the samples of several dataset groups into token-budgeted sequences."""

    # The pool each iteration lends `padded_images` buffers from: a hook, so the benchmark
    # can measure against fresh zero-filled buffers (`bagel_data.bench.fast.FreshZeroPool`).
    pad_pool_factory: Callable[[], PadBufferPool] = PadBufferPool

    # Over 50 lines only by the reference's public signature and its docstring; the body is two calls.
    def __init__(
        self,
        data_config,
        tokenizer,
        special_tokens: dict,
        local_rank: int,
        world_size: int,
        num_workers: int,
        expected_num_tokens: int = 32768,
        max_num_tokens_per_sample: int = 16384,
        max_num_tokens: int = 36864,
        prefer_buffer_before: int = 16384,
        max_buffer_size: int = 50,
        interpolate_pos: bool = False,
        use_flex: bool = False,
        data_status=None,
        dataset_info=None,
        global_seed: int | None = None,
        *,
        compat: str | None = None,
        strict: bool = False,
        max_consecutive_failures: int = 100,
    ):
        """The reference's constructor (plus NeMo AutoModel's `dataset_info` / `global_seed`).

        `data_config` is a `DataConfig` or a `BagelDatasetConfig`: its `grouped_datasets` and
        its dropout and image-size attributes, read now. `dataset_info` defaults to the
        config's own (a `BagelDatasetConfig`), then to the module-level
        `bagel_data.datasets.DEFAULT_DATASET_INFO`. `data_status` is this rank's dict
        (group -> worker id -> position) or the list gathered over ranks. `global_seed`,
        when given, is mixed into the packer's own generator (never the global ones).
        `compat` defaults to the data config's.
        """
        from ..reference.construct import assemble_from_data_config  # builds the families

        budgets = dict(
            expected_num_tokens=expected_num_tokens,
            max_num_tokens_per_sample=max_num_tokens_per_sample,
            max_num_tokens=max_num_tokens,
            prefer_buffer_before=prefer_buffer_before,
            max_buffer_size=max_buffer_size,
            interpolate_pos=interpolate_pos,
            use_flex=use_flex,
        )
        parts = assemble_from_data_config(
            data_config,
            tokenizer,
            budgets,
            dataset_info,
            local_rank=local_rank,
            world_size=world_size,
            num_workers=num_workers,
            data_status=data_status,
            strict=strict,
            max_consecutive_failures=max_consecutive_failures,
        )
        self._setup(
            parts.datasets,
            parts.config,
            special_tokens,
            weights=parts.weights,
            mandatory=parts.mandatory,
            local_rank=parts.local_rank,
            world_size=parts.world_size,
            num_workers=num_workers,
            data_seed=int(getattr(data_config, "data_seed", 42)),
            tokenizer=tokenizer,
            compat=getattr(data_config, "compat", None) if compat is None else compat,
            global_seed=global_seed,
        )
        self.data_config = data_config

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
        compat: str | None = None,
        global_seed: int | None = None,
    ) -> PackedDataset:
        """A packed dataset over already-built family datasets (`groups`: name -> dataset).
        Internal: the public constructors fill in the topology and the seed."""
        packed = cls.__new__(cls)
        packed._setup(
            groups,
            config,
            special_tokens,
            weights=weights,
            mandatory=mandatory,
            local_rank=local_rank,
            world_size=world_size,
            num_workers=num_workers,
            data_seed=data_seed,
            tokenizer=tokenizer,
            compat=compat,
            global_seed=global_seed,
        )
        return packed

    def _setup(
        self,
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
        tokenizer,
        compat: str | None,
        global_seed: int | None,
    ) -> None:
        super().__init__()
        self.grouped_datasets = list(groups.values())
        self.group_names = list(groups)
        self.config = config
        self.data_config = None
        self.special_tokens = SpecialTokens(**special_tokens)
        for name, value in special_tokens.items():
            setattr(self, name, value)  # the reference exposes them as attributes
        # A weight may be a schedule (packing/schedule.py); `grouped_weights`, the reference's
        # attribute, holds the weights at step 0.
        self.weight_schedules = [as_schedule(weights[name]) for name in self.group_names]
        self.grouped_weights = [schedule.at(0) for schedule in self.weight_schedules]
        self.is_mandatory = [bool(mandatory[name]) for name in self.group_names]
        self.local_rank, self.world_size, self.num_workers = local_rank, world_size, num_workers
        self.data_seed = data_seed
        self.global_seed = _check_global_seed(global_seed)
        self.tokenizer = tokenizer
        self.storage_options = storage.registered()  # travels to spawned workers with the dataset
        self._live: PackState | None = None  # the state of the running iteration
        self._resume: dict | None = None  # a checkpoint to continue from on the next iter()
        self.compat = check_compat(compat)  # "bagel": the reference's behaviour (docs/compat.md)
        self.compat_seed = None  # compat: the generators' seed outside a DataLoader worker (default data_seed)
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

    # -- the mixing loop -------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict]:
        storage.register_all(self.storage_options)
        state = self._start_state()
        self._live = state
        cfg = self.config
        clock = StepClock(self.weight_schedules, state.topology.worker_id, state.topology.num_workers, state.step_base)
        weights = clock.weights(clock.step(state.packs))  # updated in place as each pack opens
        choose = group_chooser(cfg.mix_by, weights, state.group_tokens, state.rng)
        draw = self._drawer(state)
        pad_pool = self.pad_pool_factory()  # this iteration's padded_images buffers, reused once freed

        def new_pack() -> PackBuilder:
            return PackBuilder(cfg, self.special_tokens, state.rng, self.get_flattened_position_ids, pad_pool)

        # One loop on purpose: it follows the reference's control flow branch for branch, so
        # the random draws come in the reference's order (tests/conformance pin it).
        pack = new_pack()
        while True:
            if pack.is_empty():
                self._enter_step(clock, weights, state)
                self._open_pack(pack, draw, state)
            if cfg.pack_strategy == "best_fit":
                self._fill_best(pack, state, lambda: draw(choose()))
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
            pack.add(item.sample)
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
