"""Splitting a family's units over ranks and DataLoader workers, one epoch seed at a time.

A *unit* is what a family shards: a JSONL line (VLM), a parquet file (T2I) or a
(parquet file, row group) pair (edit). `set_epoch(seed)` sorts the units, shuffles them
with `random.Random(seed)`, and gives each rank a contiguous slice; each worker then takes a
contiguous slice of its rank's list, reversed (the reference's order). Unlike the reference,
a count that does not divide evenly gives the remainder to the first ranks/workers instead
of dropping it; when it divides, the slices are the reference's.
"""

from __future__ import annotations

import dataclasses
import random
import zlib
from collections.abc import Sequence

import numpy as np
import torch

from .errors import ConfigError, SkipLog


def split_evenly(count: int, parts: int, index: int) -> range:
    """The `index`-th of `parts` contiguous ranges covering `range(count)`.

    The first `count % parts` ranges are one longer, so nothing is left out.
    """
    base, extra = divmod(count, parts)
    start = index * base + min(index, extra)
    return range(start, start + base + (1 if index < extra else 0))


def stable_hash(text: str) -> int:
    """A hash that is the same in every process (Python's `hash` is salted)."""
    return zlib.crc32(text.encode("utf-8"))


@dataclasses.dataclass(frozen=True)
class WorkerShard:
    """The units one DataLoader worker of one rank iterates, as global unit indices."""

    worker_id: int
    num_workers: int
    unit_ids: Sequence[int]


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
        if info is None:
            ids = np.arange(self.rank_unit_ids.start, self.rank_unit_ids.stop, dtype=np.int64)
            return WorkerShard(0, 1, ids)
        self._check_enough_units(len(self.epoch_units), info.num_workers)
        span = split_evenly(len(self.rank_unit_ids), info.num_workers, info.id)
        first = self.rank_unit_ids.start
        ids = np.arange(first + span.start, first + span.stop, dtype=np.int64)
        return WorkerShard(info.id, info.num_workers, ids[::-1])

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

    # -- iteration -----------------------------------------------------------------------
    # A *cursor* is `(pass index, *position)`: which pass over this worker's units, and the
    # sample's position within the pass (its `data_indexes`). Families implement
    # `_iter_pass` (every sample of one pass from a start position) and `sample_at`.

    def _iter_pass(self, shard: WorkerShard, pass_index: int, start: list[int] | None, log: SkipLog):
        """Yield `(position, sample)` for one pass, from `start` (inclusive) or the beginning."""
        raise NotImplementedError

    def sample_at(self, cursor: tuple[int, ...]) -> dict:
        """Rebuild the sample at `cursor` exactly (same rows, same random choices)."""
        raise NotImplementedError

    @staticmethod
    def _position_after(position: list[int]) -> list[int]:
        """The first position to read when resuming just after `position`."""
        return [*position[:-1], position[-1] + 1]

    def iter_samples(self, after: tuple[int, ...] | None = None, log: SkipLog | None = None):
        """Yield `(cursor, sample)` forever, starting just after cursor `after`.

        Bad rows are counted in `log` (a fresh one when None).
        """
        shard = self.worker_shard()
        if log is None:
            log = self.new_skip_log()
        self.skip_log = log
        pass_index, start = 0, None
        if after is not None:
            pass_index, start = after[0], self._position_after(list(after[1:]))
        while True:
            for position, sample in self._iter_pass(shard, pass_index, start, log):
                log.ok()
                yield (pass_index, *position), sample
            start = None
            pass_index += 1

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
