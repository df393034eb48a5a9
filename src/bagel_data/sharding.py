"""Splitting a family's units over ranks and DataLoader workers, one epoch seed at a time.

A *unit* is what a family shards: a JSONL line (VLM), a parquet file (T2I) or a
(parquet file, row group) pair (edit). `set_epoch(seed)` sorts the units, shuffles them
with `random.Random(seed)`, and gives each rank a contiguous slice; each worker then takes a
contiguous slice of its rank's list, reversed (the reference's order). Unlike the reference,
a count that does not divide evenly gives the remainder to the first ranks/workers instead
of dropping it; when it divides, the slices are the reference's.

Iteration goes by *phases* of a work list: full passes over the worker's units, preceded
after an elastic restart by the inherited samples and the old workers' remainder
(`checkpoint/restart.py`). The family part that uses this is `families/unit_plan.py`
(which worker reads which units) and `families/base.py` (walking the phases); this module
is the unit arithmetic alone.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence

import numpy as np
import torch.utils.data


def split_evenly(count: int, parts: int, index: int) -> range:
    """The `index`-th of `parts` contiguous ranges covering `range(count)`.

    The first `count % parts` ranges are one longer, so nothing is left out.
    """
    base, extra = divmod(count, parts)
    start = index * base + min(index, extra)
    return range(start, start + base + (1 if index < extra else 0))


def units_needed(world_size: int, num_workers: int) -> int:
    """The units a group needs so that every worker of every rank gets at least one (a
    worker without any stops the run); validate and prepare both judge by it."""
    return world_size * max(num_workers, 1)


def stable_hash(text: str) -> int:
    """A hash that is the same in every process (Python's `hash` is salted)."""
    return zlib.crc32(text.encode("utf-8"))


def shard_unit_ids(num_units: int, rank: int, world_size: int, worker_id: int, num_workers: int) -> np.ndarray:
    """The global unit indices one worker iterates, in its order.

    `num_workers == 0` is the main process (no DataLoader workers): the whole rank slice in
    order. A DataLoader worker takes its contiguous span of the rank slice, reversed.
    """
    rank_ids = split_evenly(num_units, world_size, rank)
    if num_workers == 0:
        return np.arange(rank_ids.start, rank_ids.stop, dtype=np.int64)
    span = split_evenly(len(rank_ids), num_workers, worker_id)
    return np.arange(rank_ids.start + span.start, rank_ids.start + span.stop, dtype=np.int64)[::-1]


def reference_rank_ids(num_units: int, world_size: int, rank: int) -> range:
    """The reference's rank slice (`compat="bagel"`): `num_units // world_size` units each;
    the last `num_units % world_size` units are read by no rank."""
    size = num_units // world_size
    return range(rank * size, (rank + 1) * size)


def reference_shard_unit_ids(num_units: int, rank: int, world_size: int, worker_id: int, num_workers: int):
    """`shard_unit_ids` as the reference shards (`compat="bagel"`): a worker takes
    `per_rank // num_workers` units of its rank slice, reversed; remainders are unused."""
    rank_ids = reference_rank_ids(num_units, world_size, rank)
    if num_workers == 0:
        return np.arange(rank_ids.start, rank_ids.stop, dtype=np.int64)
    size = len(rank_ids) // num_workers
    start = rank_ids.start + worker_id * size
    return np.arange(start, start + size, dtype=np.int64)[::-1]


@dataclasses.dataclass(frozen=True)
class WorkerTopology:
    """Which worker of which rank this is: the one description of a process's place.

    `num_workers` is 0 in the main process (a DataLoader without workers). A checkpoint
    stores it as `dataclasses.asdict` (keys rank, world_size, worker_id, num_workers).
    """

    rank: int
    world_size: int
    worker_id: int
    num_workers: int

    @classmethod
    def current(cls, rank: int, world_size: int) -> WorkerTopology:
        """The calling process's topology: `torch.utils.data.get_worker_info()`, read once."""
        info = torch.utils.data.get_worker_info()
        worker_id, num_workers = (0, 0) if info is None else (info.id, info.num_workers)
        return cls(rank, world_size, worker_id, num_workers)

    @property
    def global_worker(self) -> tuple[int, int]:
        """(this worker's index among all workers of all ranks, how many there are)."""
        per_rank = max(self.num_workers, 1)
        return self.rank * per_rank + self.worker_id, self.world_size * per_rank

    def shard(self, num_units: int, reference: bool = False) -> WorkerShard:
        """This worker's share of `num_units` units (`shard_unit_ids`; with `reference`, the
        reference's remainder-dropping `reference_shard_unit_ids`)."""
        split = reference_shard_unit_ids if reference else shard_unit_ids
        ids = split(num_units, self.rank, self.world_size, self.worker_id, self.num_workers)
        return WorkerShard(self.rank, self.world_size, self.worker_id, self.num_workers, ids)


@dataclasses.dataclass(frozen=True)
class WorkerShard(WorkerTopology):
    """A worker's topology and the units it iterates, as global unit indices."""

    unit_ids: np.ndarray  # int64, in iteration order (`shard_unit_ids`)


class PassWork:
    """One pass over a shard: item i is the whole unit `unit_ids[i]`, read in pass `pass_index`."""

    def __init__(self, unit_ids: Sequence[int] | np.ndarray, pass_index: int):
        self.unit_ids, self.pass_index = unit_ids, pass_index

    def __len__(self) -> int:
        return len(self.unit_ids)

    def item(self, index: int) -> tuple[int, int, tuple]:
        """(global unit id, pass whose randomness it uses, first row within the unit)."""
        return int(self.unit_ids[index]), self.pass_index, ()


# Cursor phases before the first full pass, used only after an elastic restart (restart.py).
INHERITED_PHASE = -2  # samples an old topology held in its buffers, drawn again first
REMAINDER_PHASE = -1  # rows the old workers had not reached in their pass in progress


def phase_work(shard: WorkerShard, restart_plan, phase: int):
    """The work list of one phase of a worker: its remainder share, or a full pass."""
    if phase == REMAINDER_PHASE:
        return restart_plan.remainder_for(*shard.global_worker)
    return PassWork(shard.unit_ids, phase)


def row_key_at(shard: WorkerShard, restart_plan, cursor: tuple[int, ...]) -> tuple[int, ...]:
    """`(global unit id, pass, *row within the unit)` of the row a worker's cursor points at."""
    phase, index, *row = cursor
    if phase == INHERITED_PHASE:
        return tuple(restart_plan.inherited_for(*shard.global_worker)[index])
    unit_id, pass_index, _ = phase_work(shard, restart_plan, phase).item(index)
    return (unit_id, pass_index, *row)
