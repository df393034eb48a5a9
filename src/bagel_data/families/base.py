"""The base class of every family: units, epoch shuffling, rank/worker sharding, phases.

A family implements `get_data_paths` (its units) and `_unit_samples` (the good rows of one
unit); this class owns the epoch order, which worker reads what, the cursors that make
resume exact, and the per-sample random generators.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from ..errors import ConfigError, ResumeError, SkipLog
from ..sample import with_tensors
from ..sharding import (
    INHERITED_PHASE,
    REMAINDER_PHASE,
    WorkerShard,
    phase_work,
    row_key_at,
    shard_unit_ids,
    split_evenly,
    stable_hash,
)


class DistributedIterableDataset(torch.utils.data.IterableDataset):
    """Base of the three families: units, epoch shuffling, rank/worker sharding."""

    def __init__(self, dataset_name: str, local_rank: int = 0, world_size: int = 1, num_workers: int = 8):
        if world_size < 1 or not 0 <= local_rank < world_size:
            raise ConfigError(
                "local_rank", local_rank, f"must be in [0, world_size={world_size}); pass the rank of this process"
            )
        self.dataset_name = dataset_name
        self.local_rank = local_rank
        self.world_size = world_size
        self.num_workers = num_workers
        self.rng = random.Random()  # only ever re-seeded by set_epoch
        self.data_paths = None
        self.epoch_seed = 42
        self.strict = False
        self.max_consecutive_failures = 100
        self.skip_log = SkipLog(dataset_name)
        self.restart_plan = None  # set by an elastic restart (restart.py)

    # -- units -------------------------------------------------------------------------
    def get_data_paths(self, *args, **kwargs):
        raise NotImplementedError

    def sorted_units(self) -> list:
        """The units in their canonical (sorted) order; families may override."""
        return sorted(self.data_paths)

    def set_epoch(self, seed: int = 42) -> None:
        if self.data_paths is None:
            return
        units = self.sorted_units()
        self.rng.seed(seed)
        self.rng.shuffle(units)
        self.epoch_seed = seed
        self.epoch_units = units
        self.rank_unit_ids = split_evenly(len(units), self.world_size, self.local_rank)
        self.num_files_per_rank = len(self.rank_unit_ids)
        self._check_enough_units(len(units), self.num_workers)

    @property
    def data_paths_per_rank(self) -> list:
        return [self.epoch_units[i] for i in self.rank_unit_ids]

    def _check_enough_units(self, num_units: int, num_workers: int) -> None:
        needed = self.world_size * max(num_workers, 1)
        if num_units < needed:
            raise ConfigError(
                f"{self.dataset_name}.num_used_data",
                num_units,
                f"{num_units} units cannot be shared by {self.world_size} rank(s) x "
                f"{max(num_workers, 1)} worker(s): at least {needed} are needed. Raise num_used_data "
                "(parquet files repeat to fill it), add data, or use fewer workers/ranks.",
            )

    def worker_shard(self) -> WorkerShard:
        """This process's share: the whole rank list outside a DataLoader worker."""
        info = torch.utils.data.get_worker_info()
        worker_id, num_workers = (0, 0) if info is None else (info.id, info.num_workers)
        if info is not None:
            self._check_enough_units(len(self.epoch_units), num_workers)
        ids = shard_unit_ids(len(self.epoch_units), self.local_rank, self.world_size, worker_id, num_workers)
        return WorkerShard(self.local_rank, self.world_size, worker_id, num_workers, ids)

    def get_data_paths_per_worker(self):
        """The reference's view: (this worker's units, worker id)."""
        shard = self.worker_shard()
        return [self.unit_view(self.epoch_units[int(i)]) for i in shard.unit_ids], shard.worker_id

    def unit_view(self, unit):
        """A unit as the reference's `data_paths` holds it."""
        return unit

    # -- per-sample randomness -----------------------------------------------------------
    def sample_rng(self, unit_id: int, *position: int) -> np.random.Generator:
        """A generator owned by one sample: the same wherever and whenever it is rebuilt."""
        key = [self.epoch_seed & 0xFFFFFFFF, stable_hash(self.dataset_name), int(unit_id), *position]
        return np.random.default_rng(np.random.SeedSequence(key))

    def new_skip_log(self) -> SkipLog:
        self.skip_log = SkipLog(self.dataset_name, self.strict, self.max_consecutive_failures)
        return self.skip_log

    # -- what families implement -----------------------------------------------------------
    # A row is addressed by (global unit id, pass, *row within the unit); the row within is
    # `(row group, row)` for T2I, `(row,)` for edit and `()` for VLM (a unit is one line).
    # The per-sample randomness is keyed by exactly that address, so a row gives the same
    # sample whichever worker reads it.

    def _unit_samples(self, unit_id: int, pass_index: int, start: tuple, log: SkipLog, single: bool = False):
        """Yield `(row within the unit, SampleBuilder)` for the good rows from `start` on
        (or, when `single`, for the row at `start` only); bad rows are counted in `log`."""
        raise NotImplementedError

    def data_index(self, position: list[int]):
        """The sample's `data_indexes` (the reference's position) for a position in a phase."""
        return list(position)

    # -- iteration -----------------------------------------------------------------------
    # A *cursor* is `(phase, *position)`: the phase is the pass index (or, after an elastic
    # restart, INHERITED_PHASE / REMAINDER_PHASE first), the position is
    # `(item index, *row within the unit)` within that phase's work list.

    def _first_phase(self) -> int:
        return INHERITED_PHASE if self.restart_plan is not None else 0

    def _next_phase(self, phase: int) -> int:
        if phase == REMAINDER_PHASE:
            return self.restart_plan.first_pass
        return phase + 1

    def _iter_phase(self, shard: WorkerShard, phase: int, start: list[int] | None, log: SkipLog):
        """Yield `(position, sample)` for one phase, from `start` (inclusive) or its beginning."""
        if phase == INHERITED_PHASE:
            refs = self.restart_plan.inherited_for(*shard.global_worker)
            for index in range(start[0] if start else 0, len(refs)):
                sample = self._sample_at_row(shard, refs[index], [index], log)
                if sample is None:  # it was a good sample when the old worker buffered it
                    raise ResumeError(
                        f"{self.dataset_name}: the buffered row {refs[index]} (unit, pass, row) no longer gives "
                        "a sample; the data changed since the checkpoint"
                    )
                yield [index], sample
            return
        work = phase_work(shard, self.restart_plan, phase)
        first = start[0] if start else 0
        for index in range(first, len(work)):
            unit_id, pass_index, row_start = work.item(index)
            if start and index == first and len(start) > 1:
                row_start = tuple(start[1:])
            for row, builder in self._unit_samples(unit_id, pass_index, row_start, log):
                position = [index, *row]
                yield position, self._build(builder, shard, position, (unit_id, pass_index, *row))

    def _iter_pass(self, shard: WorkerShard, pass_index: int, start: list[int] | None, log: SkipLog):
        """Yield `(position, sample)` for one full pass over the shard."""
        return self._iter_phase(shard, pass_index, start, log)

    def _build(self, builder, shard: WorkerShard, position: list[int], row_key: tuple) -> dict:
        sample = builder.build(self.data_index(position), shard.worker_id, self.dataset_name)
        sample["row_key"] = row_key  # where it came from, whatever the topology
        return sample

    def _sample_at_row(self, shard: WorkerShard, row_key: tuple, position: list[int], log: SkipLog) -> dict | None:
        unit_id, pass_index, *row = row_key
        for found, builder in self._unit_samples(unit_id, pass_index, tuple(row), log, single=True):
            if list(found) == row:
                return self._build(builder, shard, position, tuple(row_key))
        return None

    def row_key(self, cursor: tuple[int, ...]) -> tuple[int, ...]:
        """`(global unit id, pass, *row within the unit)` of the sample at `cursor`."""
        return row_key_at(self.worker_shard(), self.restart_plan, cursor)

    def sample_at(self, cursor: tuple[int, ...], pending: bool = False) -> dict | None:
        """Rebuild the sample at `cursor` exactly (same row, same random choices); None when
        that row no longer gives a sample. `pending`: see `iter_samples`."""
        sample = self._sample_at_row(self.worker_shard(), self.row_key(cursor), list(cursor[1:]), self.new_skip_log())
        return sample if sample is None or pending else with_tensors(sample)

    @staticmethod
    def _position_after(position: list[int]) -> list[int]:
        """The first position to read when resuming just after `position`."""
        return [*position[:-1], position[-1] + 1]

    def iter_samples(self, after: tuple[int, ...] | None = None, log: SkipLog | None = None, pending: bool = False):
        """Yield `(cursor, sample)` forever, starting just after cursor `after`.

        Bad rows are counted in `log` (a fresh one when None). With `pending` (the packer's
        path) images stay `PendingImage`s, converted straight into the batch; otherwise
        `image_tensor_list` holds float `(C, H, W)` tensors.
        """
        shard = self.worker_shard()
        if log is None:
            log = self.new_skip_log()
        self.skip_log = log
        phase, start = self._first_phase(), None
        if after is not None:
            phase, start = after[0], self._position_after(list(after[1:]))
        while True:
            for position, sample in self._iter_phase(shard, phase, start, log):
                log.ok()
                yield (phase, *position), (sample if pending else with_tensors(sample))
            start = None
            phase = self._next_phase(phase)

    def resume_cursor(self, worker_id: int) -> tuple[int, ...] | None:
        """The reference's `data_status` entry of a worker as a cursor in the first pass."""
        if self.data_status is None:
            return None
        position = self.data_status[worker_id]
        return (0, *(position if isinstance(position, (list, tuple)) else [position]))

    def __iter__(self):
        after = self.resume_cursor(self.worker_shard().worker_id)
        for _, sample in self.iter_samples(after):
            yield sample
