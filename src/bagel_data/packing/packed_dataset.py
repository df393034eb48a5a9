"""Mixing the groups by weight and emitting packs: the `PackedDataset` of docs/packing.md.

At the start of each pack, every mandatory group contributes its next sample that fits
the per-sample budget. Then, while the pack is short of `prefer_buffer_before` the
overflow buffer is drained first; otherwise a group is drawn by weight. A sample that would
overflow `max_num_tokens` waits in the buffer; when the buffer is full (or the sample came
from it) the pack is emitted and, unlike the reference, the sample is kept: it opens the
next pack right after the mandatory samples, or, when it cannot fit even beside them, is
skipped with a named, counted reason. The buffer's look-ahead never exceeds
`max_buffer_size`; after a schedule's change point, what waited from the phase before
drains beside it at its group's new pace (`pacing.py`).

All randomness (group choice, dropout, timesteps) comes from one generator per worker,
derived from `data_seed`, the rank and the worker id (in compat mode, from the policy's
reference stream). `state_dict()` / `load_state_dict()`
(torchdata's Stateful protocol) checkpoint the stream after any batch:
`checkpoint/stream.py` (where a stream starts from, one path for every input) and
`checkpoint/state.py` (what a checkpoint holds).

The class holds its parts: each group behind one interface (`groups.py`), and per
iteration the draw path (`groups.Drawer`), the overflow buffer and carry (`overflow.py`),
the placement steps (`placer.py`) and the loop of the pack strategy (`loops.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import cast

import torch

from ..checkpoint.merge import merge_worker_states
from ..checkpoint.state import CHOOSE, DRAW, OVERFLOW, PACE, PackState, ResumeError
from ..checkpoint.stream import StreamSetup, save_state, start_state
from ..checkpoint.tokens import tokenizer_fingerprint
from ..compat import CompatPolicy
from ..schema.settings import SETTING_NAMES
from ..sources import storage
from .buffers import PadBufferPool
from .choosers import GroupChoice, group_choice_rule
from .config import PackingConfig, SpecialTokens
from .groups import Drawer, DrawState, GroupSource
from .layout import get_flattened_position_ids_extrapolate, get_flattened_position_ids_interpolate
from .loops import PACK_LOOPS
from .overflow import OverflowState
from .pacing import PaceState
from .pack import PackBuilder
from .parts import Assembled
from .placer import Placer
from .schedule import StepClock, as_schedule
from .torch_support import check_torch


class PackedDataset(torch.utils.data.IterableDataset):
    """Packs the samples of several dataset groups into token-budgeted sequences."""

    # The pool each iteration lends `padded_images` buffers from: a hook, so the benchmark
    # can measure against fresh zero-filled buffers (benchmarks' `bagel_bench.fast.FreshZeroPool`).
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
        self.groups = [GroupSource.of(i, name, dataset) for i, (name, dataset) in enumerate(parts.datasets.items())]
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
        # The group-choice rule, looked up here, in the process that builds the dataset: a
        # rule registered there travels to spawned workers with it (`choosers.py`).
        self.group_choice_rule = group_choice_rule(parts.config.mix_by)
        self.global_seed = _check_global_seed(global_seed)
        self.tokenizer = tokenizer
        self._tokenizer_fingerprint: dict | None = None  # made at the first checkpoint or start
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
        for group in self.groups:
            group.set_epoch(seed)

    # -- the mixing loop -------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict]:
        check_torch()  # a torch without the internals used below fails here, naming them
        storage.register_all(self.storage_options)
        saved, self._resume = self._resume, None
        state = start_state(self._setup_of_stream(), saved)
        self._live = state
        placer = self._placer(state)
        stop_rebuilding = placer.overflow.prefetch()  # a resumed buffer's rows, fetched at once
        try:
            yield from PACK_LOOPS[self.config.pack_strategy](placer)
        finally:
            stop_rebuilding()  # a closed stream's buffered rows that no thread has started

    def _placer(self, state: PackState) -> Placer:
        """This iteration's parts over `state`: the clock and weights of the mixture
        schedule, the group chooser, the draw path and where samples go."""
        cfg = self.config
        clock = StepClock(self.weight_schedules, state.topology.worker_id, state.topology.num_workers, state.step_base)
        weights = clock.weights(clock.step(state.packs))  # updated in place as each pack opens
        pad_pool = self.pad_pool_factory()  # this iteration's padded_images buffers, reused once freed
        choice = cast(GroupChoice, state.stages[CHOOSE])

        def new_pack() -> PackBuilder:
            return PackBuilder(
                cfg, self.special_tokens, state.rng, self.get_flattened_position_ids, pad_pool, self.policy
            )

        return Placer(
            groups=self.groups,
            mandatory=self.is_mandatory,
            config=cfg,
            policy=self.policy,
            state=state,
            draw=Drawer(
                self.groups, state, cast(DrawState, state.stages[DRAW]), cfg, self.policy, self.data_seed, choice
            ),
            held=cast(OverflowState, state.stages[OVERFLOW]),
            choice=choice,
            pace=cast(PaceState, state.stages[PACE]),
            clock=clock,
            weights=weights,
            new_pack=new_pack,
        )

    # -- checkpoints (torchdata's Stateful protocol) -----------------------------------------
    def _setup_of_stream(self) -> StreamSetup:
        return StreamSetup(
            self.groups,
            self.local_rank,
            self.world_size,
            self.data_seed,
            self.global_seed,
            self.policy,
            self._new_stages,
            self._fingerprint(),
        )

    def _new_stages(self) -> dict:
        """The fresh states of the stages that keep one, by their checkpoint keys: the draw
        path's (`stages.draw`), the overflow's (`stages.overflow`; loaded before the pacer's,
        which checks its backlog against the buffer), the group choice's (`stages.choose`)
        and the pacer's (`stages.pace`)."""
        return {
            DRAW: DrawState(self.group_names),
            OVERFLOW: OverflowState(self.group_names),
            CHOOSE: self.group_choice_rule(self.group_names),
            PACE: PaceState(self.group_names, self.config.max_buffer_size),
        }

    def _fingerprint(self) -> dict | None:
        """The tokenizer's fingerprint a checkpoint records: the packer's tokenizer, else the
        first group's (a packer built from groups gets none of its own)."""
        if self._tokenizer_fingerprint is None:
            tokenizer = self.tokenizer
            for dataset in self.grouped_datasets if tokenizer is None else ():
                tokenizer = getattr(dataset, "tokenizer", None)
                if tokenizer is not None:
                    break
            self._tokenizer_fingerprint = tokenizer_fingerprint(tokenizer, dataclasses.asdict(self.special_tokens))
        return self._tokenizer_fingerprint

    def state_dict(self) -> dict:
        """Checkpoint of this worker's stream."""
        return save_state(self._setup_of_stream(), self._live, self._resume)

    def load_state_dict(self, state_dict: dict) -> None:
        """Continue from a checkpoint on the next `iter()`; checked against the topology then.

        An elastic checkpoint (from `load_elastic_state`) loads into any topology.
        """
        self._resume = state_dict

    def load_elastic_state(self, worker_states: list[dict]) -> dict:
        """Continue the checkpoints of *all* workers of all ranks of a run with another world
        size or worker count; returns the merged checkpoint (the same on every new rank).

        Not available with `compat="bagel"` (the reference has no such restart).
        Call it before building the loader, with the dataset states of every old worker
        (`bagel_data.loader.worker_dataset_states` of each rank's loader state); see
        docs/elastic.md.
        """
        if not self.policy.allows_elastic_restart:
            raise ResumeError(
                'compat="bagel" resumes only in the same topology (load_state_dict) or from the '
                "reference's data_status; an elastic restart would change which rows are read"
            )
        self._resume = merge_worker_states(self._setup_of_stream(), worker_states)  # checked here, not in a worker
        return self._resume

    def group_inputs(self) -> list[dict | None]:
        """Each group's input files and sizes, as a checkpoint records them (checkpoint/inputs.py)."""
        return [group.input_record() for group in self.groups]

    def group_unit_counts(self) -> list[int]:
        """How many units (files, row groups or lines) each group shards."""
        return [group.unit_count() for group in self.groups]

    @property
    def stats(self) -> dict:
        """Packs, tokens and samples emitted, and rows skipped by reason, in this process."""
        state = self._live
        if state is None:
            return {"packs": 0, "tokens": 0, "samples": {}, "skips": {}, "history": None, "read_ahead": {}}
        read_ahead = {group.name: group.read_ahead_stats() for group in self.groups}
        return {
            "packs": state.packs,
            "tokens": state.tokens,
            "samples": dict(state.samples),
            "skips": {name: log.as_dict() for name, log in zip(self.group_names, state.logs)},
            "history": state.history,  # totals before the last elastic restart, if any
            "read_ahead": {name: stats for name, stats in read_ahead.items() if stats is not None},
        }


def _check_global_seed(global_seed):
    if global_seed is None:
        return None
    if isinstance(global_seed, bool) or not isinstance(global_seed, int) or global_seed < 0:
        from ..errors import ConfigError

        raise ConfigError("global_seed", global_seed, "must be None or a non-negative int")
    return int(global_seed)
