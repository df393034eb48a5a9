"""The base class of every family: units, epoch shuffling, rank/worker sharding, phases.

A family implements `get_data_paths` (its units) and `_unit_samples` (the good rows of one
unit); this class owns the epoch order, which worker reads what, the cursors that make
resume exact, and the per-sample random generators.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..compat import CompatRandom, check_compat
from ..errors import BagelDataError, ConfigError, EmptyWorkerError, ResumeError, SkipLog, SkipReason
from ..sample import with_tensors
from ..sharding import (
    INHERITED_PHASE,
    REMAINDER_PHASE,
    WorkerShard,
    WorkerTopology,
    phase_work,
    reference_rank_ids,
    row_key_at,
    split_evenly,
    stable_hash,
)

if TYPE_CHECKING:
    from ..checkpoint.restart import GroupRestart


class DistributedIterableDataset(torch.utils.data.IterableDataset):
    """Base of the three families: units, epoch shuffling, rank/worker sharding."""

    # Set by `set_epoch` once the family has its units; `data_status` by each family's
    # constructor (the reference's per-worker resume positions, or None).
    epoch_units: Sequence[Any]
    rank_unit_ids: range
    num_files_per_rank: int
    data_status: list | None

    def __init__(
        self,
        dataset_name: str,
        local_rank: int = 0,
        world_size: int = 1,
        num_workers: int = 8,
        *,
        compat=None,
        strict: bool = False,
        max_consecutive_failures: int = 100,
    ):
        if world_size < 1 or not 0 <= local_rank < world_size:
            raise ConfigError(
                "local_rank", local_rank, f"must be in [0, world_size={world_size}); pass the rank of this process"
            )
        self.dataset_name = dataset_name
        self.local_rank = local_rank
        self.world_size = world_size
        self.num_workers = num_workers
        self.rng = random.Random()  # only ever re-seeded by set_epoch
        self.data_paths: Any = None  # the family's units: a list, or the VLM family's JsonlIndex
        self.epoch_seed = 42
        self.strict = bool(strict)  # raise on the first bad row instead of skipping it
        self.max_consecutive_failures = int(max_consecutive_failures)
        self.skip_log = SkipLog(dataset_name, self.strict, self.max_consecutive_failures)
        self.restart_plan: GroupRestart | None = None  # set by an elastic restart (restart.py)
        self.compat = check_compat(compat)  # "bagel": the reference's behaviour (docs/compat.md)
        self.compat_seed: int | None = None  # compat: the generators' seed outside a DataLoader worker
        self.compat_rng: Any = None  # compat: the stream this worker draws from (shared with the packer)

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
        self.rank_unit_ids = self._rank_ids(len(units))
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
        topology = WorkerTopology.current(self.local_rank, self.world_size)
        if topology.num_workers:
            self._check_enough_units(len(self.epoch_units), topology.num_workers)
        return topology.shard(len(self.epoch_units), reference=bool(self.compat))

    def _rank_ids(self, num_units: int) -> range:
        if self.compat:  # the reference drops the remainder (SPEC 8.3)
            return reference_rank_ids(num_units, self.world_size, self.local_rank)
        return split_evenly(num_units, self.world_size, self.local_rank)

    def get_data_paths_per_worker(self):
        """The reference's view: (this worker's units, worker id)."""
        shard = self.worker_shard()
        return [self.unit_view(self.epoch_units[int(i)]) for i in shard.unit_ids], shard.worker_id

    def unit_view(self, unit):
        """A unit as the reference's `data_paths` holds it."""
        return unit

    def input_paths(self) -> list[str]:
        """The files this group reads (a checkpoint records them with their sizes)."""
        return sorted({unit[0] if isinstance(unit, tuple) else unit for unit in self.data_paths or ()})

    def input_record(self) -> dict:
        """`checkpoint.inputs.input_record` of this group's files, computed once per process."""
        if getattr(self, "_input_record", None) is None:
            from ..checkpoint.inputs import input_record

            self._input_record = input_record([str(path) for path in self.input_paths()])
        return self._input_record

    def unit_label(self, unit_id: int) -> str:
        """The unit at `unit_id` of the epoch order, as error messages name it."""
        return str(self.epoch_units[unit_id])

    # -- per-sample randomness -----------------------------------------------------------
    def sample_rng(self, unit_id: int, *position: int) -> np.random.Generator:
        """A generator owned by one sample: the same wherever and whenever it is rebuilt.

        In compat mode, the worker's shared stream instead (the reference's globals); its
        state before the row is kept so that a buffered sample can be rebuilt exactly."""
        if self.compat:
            self._row_rng_state = self.compat_rng.get_state()
            return self.compat_rng
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

    def _guarded(self, log: SkipLog, location: str, build, *args):
        """`build(*args)`, or None with a counted ROW_FAILED skip when it raises anything
        but a library error: no exception of one row escapes to the training loop."""
        try:
            return build(*args)
        except (BagelDataError, MemoryError):
            raise
        except Exception as exc:
            log.skip(SkipReason.ROW_FAILED, location, f"{type(exc).__name__}: {exc}"[:500])
            return None

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
            assert self.restart_plan is not None  # only a restart plan has a remainder phase
            return self.restart_plan.first_pass
        return phase + 1

    def _iter_phase(self, shard: WorkerShard, phase: int, start: list[int] | None, log: SkipLog):
        """Yield `(position, sample)` for one phase, from `start` (inclusive) or its beginning."""
        if phase == INHERITED_PHASE:
            assert self.restart_plan is not None  # only a restart plan has an inherited phase
            refs = self.restart_plan.inherited_for(*shard.global_worker)
            for index in range(start[0] if start else 0, len(refs)):
                before = log.total()
                sample = self._sample_at_row(shard, refs[index], [index], log)
                if sample is None and log.total() > before:
                    continue  # e.g. its media is gone since: a counted skip
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

    def iter_pass(self, log: SkipLog, pass_index: int = 0, shard: WorkerShard | None = None):
        """Yield `(position, sample)` for one full pass over `shard` (default: this process's).

        Skipped rows are counted in `log`. Unlike `iter(dataset)`, this stops after the pass
        and ignores any restart plan or resume cursor: `bagel-data validate` walks the data
        with it. Images are float tensors, as from `iter(dataset)`.
        """
        for position, sample in self._iter_phase(
            self.worker_shard() if shard is None else shard, pass_index, None, log
        ):
            yield position, with_tensors(sample)

    def _build(self, builder, shard: WorkerShard, position: list[int], row_key: tuple) -> dict:
        sample = builder.build(self.data_index(position), shard.worker_id, self.dataset_name)
        sample["row_key"] = row_key  # where it came from, whatever the topology
        if self.compat:
            sample["compat_rng_state"] = self._row_rng_state  # the stream before this row's draws
        return sample

    def _sample_at_row(self, shard: WorkerShard, row_key: tuple, position: list[int], log: SkipLog) -> dict | None:
        unit_id, pass_index, *row = row_key
        for found, builder in self._unit_samples(unit_id, pass_index, tuple(row), log, single=True):
            if list(found) == row:
                return self._build(builder, shard, position, tuple(row_key))
        return None

    def row_location(self, row_key: tuple) -> str:
        """Where the row at `row_key` (see `_build`) lives: file and row (or line)."""
        unit_id, _, *row = row_key
        return self.describe_row(self.epoch_units[int(unit_id)], tuple(row))

    def describe_row(self, unit, row: tuple) -> str:
        return f"{unit}, row {list(row)}"

    def row_key(self, cursor: tuple[int, ...]) -> tuple[int, ...]:
        """`(global unit id, pass, *row within the unit)` of the sample at `cursor`."""
        return row_key_at(self.worker_shard(), self.restart_plan, cursor)

    def sample_at(
        self,
        cursor: tuple[int, ...],
        rng_state: dict | None = None,
        log: SkipLog | None = None,
        pending: bool = False,
    ) -> dict | None:
        """Rebuild the sample at `cursor` exactly (same row, same random choices); None when
        that row no longer gives a sample (its skip is counted in `log`, a fresh one if None).
        In compat mode `rng_state` is the stream's state before that row (the sample's
        `compat_rng_state`); the live stream is left as it was. `pending`: see `iter_samples`."""
        sample = self._rebuild(cursor, rng_state, self.new_skip_log() if log is None else log)
        return sample if sample is None or pending else with_tensors(sample)

    def _rebuild(self, cursor: tuple[int, ...], rng_state: dict | None, log: SkipLog) -> dict | None:
        if not self.compat:
            return self._sample_at_row(self.worker_shard(), self.row_key(cursor), list(cursor[1:]), log)
        if rng_state is None:
            raise ResumeError(
                f'{self.dataset_name}: compat="bagel" rebuilds a sample from the stream state before its row; '
                f"none was given for cursor {list(cursor)}"
            )
        live, self.compat_rng = self.compat_rng, CompatRandom.from_state(rng_state)
        try:
            return self._sample_at_row(self.worker_shard(), self.row_key(cursor), list(cursor[1:]), log)
        finally:
            self.compat_rng = live

    def start_compat_stream(self) -> None:
        """A fresh compat stream for a standalone iteration (the packer shares its own)."""
        seed = self.epoch_seed if self.compat_seed is None else self.compat_seed
        self.compat_rng = CompatRandom.for_context(seed)

    def unit_samples(self, shard: WorkerShard, index: int, unit_id: int, log: SkipLog):
        """The samples of one unit (item `index` of `shard`'s first pass), bad rows counted in
        `log`: what `bagel-data validate` walks, unit by unit, to find empty units."""
        for row, builder in self._unit_samples(unit_id, 0, (), log):
            yield self._build(builder, shard, [index, *row], (unit_id, 0, *row))

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
        if self.compat and self.compat_rng is None:
            self.start_compat_stream()
        phase, start = self._first_phase(), None
        if after is not None:
            phase, start = after[0], self._position_after(list(after[1:]))
        while True:
            produced, skipped = 0, log.total()
            for position, sample in self._iter_phase(shard, phase, start, log):
                log.ok()
                produced += 1
                yield (phase, *position), (sample if pending else with_tensors(sample))
            if start is None and phase >= 0 and not produced and log.total() == skipped:
                raise self._empty_pass_error(shard)
            start = None
            phase = self._next_phase(phase)

    def _empty_pass_error(self, shard: WorkerShard) -> BagelDataError:
        """A whole pass over this worker's units gave neither a row nor a skip: looping
        again would spin forever, so say which units are empty and what to do."""
        units = [self.unit_label(int(i)) for i in shard.unit_ids]
        shown = ", ".join(units[:5]) + (f" and {len(units) - 5} more" if len(units) > 5 else "")
        return EmptyWorkerError(
            f"{self.dataset_name}: rank {shard.rank} worker {shard.worker_id} read a whole pass over its "
            f"{len(units)} unit(s) ({shown}) and found no rows: they are empty (zero rows or empty row groups). "
            "Remove the empty files, or give this group more non-empty units than ranks x workers; "
            "`bagel-data validate` lists the empty units."
        )

    def resume_cursor(self, worker_id: int) -> tuple[int, ...] | None:
        """The reference's `data_status` entry of a worker as a cursor in the first pass."""
        if self.data_status is None:
            return None
        position = self.data_status[worker_id]
        return (0, *(position if isinstance(position, (list, tuple)) else [position]))

    def __iter__(self):
        after = self.resume_cursor(self.worker_shard().worker_id)
        if self.compat:
            self.start_compat_stream()
        for _, sample in self.iter_samples(after):
            yield sample
