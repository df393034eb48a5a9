"""A family's unit plan (`family.units`): the units' epoch order, this rank's and this
worker's share, the restart plan, and the generator each row owns.

The family's `data_paths` (the reference's attribute) is the plan's `data_paths`; what one
unit is (its canonical order, location, rows) is the plan's `kind` (`families/unit_kinds.py`);
the unit arithmetic is `sharding.py`. A row's generator is a `RandomSource` in either mode:
in the default mode a `SeededRandom` keyed by the row's address, in compat mode the
worker's shared reference stream.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compat import CompatPolicy
from ..compat.streams import RandomSource, SeededRandom, seed_tail
from ..errors import ConfigError
from ..sharding import WorkerShard, WorkerTopology, stable_hash
from ..sources import storage
from .row_plan import (
    DEFAULT_SHUFFLE_BUFFER,
    RowPlan,
    counts_unknown,
    open_pieces_for,
    plan_key,
    row_layout,
    row_seed,
)
from .row_share import RowLayout
from .unit_kinds import Listed

if TYPE_CHECKING:
    from ..checkpoint.restart import GroupRestart


@dataclasses.dataclass(frozen=True)
class RowRandom:
    """A row's generator and, in compat mode, the shared stream's state before its draws
    (None otherwise: a row's own generator is made again from its address)."""

    rng: RandomSource
    state: dict | None


class UnitPlan:
    """Which units this rank and worker read, in which order, and each row's generator."""

    # Samples a worker's shuffle window holds in the default mode's walk by rows (0: storage
    # order); the packed dataset sets it from `Settings.shuffle_buffer_size`.
    shuffle_buffer_size: int = DEFAULT_SHUFFLE_BUFFER
    # The fewest pieces a shuffle window holds where a resume sets it (the value its
    # checkpoint was taken under, `checkpoint/orders.py`); None: from the window's size.
    resumed_open_pieces: int | None = None
    # False keeps the walk by whole units in the default mode too (what tars, a user's family
    # without row counts and compat mode walk); tests of that walk's mechanics set it.
    walk_by_rows: bool = True

    def __init__(self, name: str, local_rank: int, world_size: int, num_workers: int, policy: CompatPolicy):
        if world_size < 1 or not 0 <= local_rank < world_size:
            raise ConfigError(
                "local_rank", local_rank, f"must be in [0, world_size={world_size}); pass the rank of this process"
            )
        self.name, self.local_rank, self.world_size, self.num_workers = name, local_rank, world_size, num_workers
        self.policy = policy
        self.kind: Listed = Listed()  # the family's unit kind (a JSONL family's lines, ...)
        self.data_paths: Any = None  # the family's units: a list, or a JSONL family's JsonlIndex
        self.epoch_seed = 42
        self.rank_unit_ids: range = range(0)
        self.restart_plan: GroupRestart | None = None  # set by an elastic restart (restart.py)
        # The epoch order and what it was made from (seed, units object, count): made on
        # first use, so the constructor's set_epoch(42) and an entrance's repeated
        # set_epoch(data_seed) cost one shuffle, not one each.
        self._epoch_units: Any = None  # a list, or a numpy array
        self._epoch_key: tuple | None = None

    def set_epoch(self, seed: int) -> None:
        if self.data_paths is None:
            return
        num_units = len(self.data_paths)  # sorted_units() holds each unit once
        self.epoch_seed = seed
        self.rank_unit_ids = self.policy.rank_unit_ids(num_units, self.world_size, self.local_rank)
        if not self.walks_rows():  # the walk by rows feeds any worker count
            self.check_enough(num_units, self.num_workers)

    def walks_rows(self) -> bool:
        """Whether this group takes the default mode's walk by rows (`row_layout`): not in
        compat mode, nor where the kind cannot count its rows ahead (a user's family's units,
        one more than two levels deep), nor for tars on an object store without a counts file:
        counting a tar's samples takes a pass over it, so every tar would be read before the
        first draw (`validate` reports the walk by units' draw spread); with one
        (`sources/tar_counts.py`) they walk by rows. Parquet files on a store walk by rows:
        their footers are read once per node (`families/row_counts.py`)."""
        if self.policy.reference or not self.walk_by_rows:
            return False
        depth = self.kind.depth
        if depth is None or depth > 2:
            return False
        if depth == 0:
            return True
        return not counts_unknown(self.kind) and (self.kind.counts_on_store or not self.reads_remote_files())

    @property
    def open_pieces(self) -> int:
        """The fewest pieces a shuffle window holds (`row_plan.open_pieces_for`)."""
        if self.resumed_open_pieces is not None:
            return self.resumed_open_pieces
        return open_pieces_for(self.shuffle_buffer_size)

    def row_order(self) -> dict | None:
        """What the walk by rows' order depends on besides the seeds and row counts (a
        checkpoint records it: `checkpoint/orders.py`); None for a walk by units."""
        if self.data_paths is None or not self.walks_rows():
            return None
        return {"shuffle_buffer_size": int(self.shuffle_buffer_size), "open_pieces": int(self.open_pieces)}

    def reads_remote_files(self) -> bool:
        """Whether the group's files are read over a network (its first file says it)."""
        paths = self.kind.input_paths(self.data_paths)
        return bool(paths) and storage.is_remote(str(paths[0]))

    def row_layout(self) -> RowLayout | None:
        """The group's rows in epoch order for the walk by rows (`families/row_plan.py`); None
        in compat mode or where the kind cannot count its rows ahead: units are walked whole."""
        if self.data_paths is None or not self.walks_rows():
            return None
        held = self.__dict__.get("_row_layout")
        if held is None or held[0] != self._key():
            held = self.__dict__["_row_layout"] = (self._key(), row_layout(self))
        return held[1]

    def shard_of(self, topology: WorkerTopology, offset: int | None = None) -> WorkerShard:
        """The share of the worker at `topology`: its units and, in the walk by rows, its
        `RowPlan` (rounds from `offset`, default: the restart plan's, else 0)."""
        layout = self.row_layout()
        if layout is None:
            if topology.num_workers:
                self.check_enough(len(self.epoch_units), topology.num_workers)
            return self.policy.worker_shard(topology, len(self.epoch_units))
        if offset is None:
            offset = getattr(self.restart_plan, "row_offset", 0) or 0
        worker, workers = topology.global_worker
        key = plan_key(self, worker, workers, offset)
        held = self.__dict__.get("_row_plan")
        if held is None or held[0] != key:
            size = int(self.shuffle_buffer_size)
            plan = RowPlan(layout, worker, workers, size, row_seed(self), offset, int(self.open_pieces))
            held = self.__dict__["_row_plan"] = (key, plan)
        shard = self.policy.worker_shard(topology, len(self.epoch_units))
        return dataclasses.replace(shard, rows=held[1])

    def _key(self) -> tuple:
        return (self.epoch_seed, id(self.data_paths), len(self.data_paths))

    @property
    def epoch_units(self) -> Sequence[Any]:
        """The units in this epoch's order: the canonical order shuffled by `epoch_seed`."""
        if self._epoch_units is None or self._epoch_key != self._key():
            units: Any = self.kind.sorted_units(self.data_paths)
            # random.shuffle swaps items by index only: a numpy array's memoryview gets the
            # same permutation as a list would, without a numpy scalar per swap.
            view: Any = memoryview(units.data) if isinstance(units, np.ndarray) else units
            random.Random(self.epoch_seed).shuffle(view)
            self._epoch_units, self._epoch_key = units, self._key()
        return self._epoch_units

    @epoch_units.setter
    def epoch_units(self, units: Sequence[Any]) -> None:
        self._epoch_units, self._epoch_key = units, self._key()

    def unit(self, unit_id: int) -> Any:
        """The unit at `unit_id` of the epoch order."""
        return self.epoch_units[int(unit_id)]

    def label(self, unit_id: int) -> str:
        """The unit at `unit_id`, as error messages name it."""
        return self.kind.label(self.unit(unit_id))

    def check_enough(self, num_units: int, num_workers: int) -> None:
        needed = self.world_size * max(num_workers, 1)
        if num_units < needed:
            raise ConfigError(*self.kind.too_few(self.name, num_units, needed, self.world_size, max(num_workers, 1)))

    def worker_shard(self) -> WorkerShard:
        """This process's share: the whole rank list outside a DataLoader worker."""
        return self.shard_of(WorkerTopology.current(self.local_rank, self.world_size))

    def rank_units(self) -> list:
        return [self.epoch_units[i] for i in self.rank_unit_ids]

    def worker_units(self) -> tuple[list, int]:
        """The reference's view: (this worker's units, worker id)."""
        shard = self.worker_shard()
        return [self.kind.view(self.epoch_units[int(i)]) for i in shard.unit_ids], shard.worker_id

    # -- per-row randomness --------------------------------------------------------------
    def row_random(self, unit_id: int, *position: int) -> RowRandom:
        """The generator one row draws from, and (compat mode) the state to rebuild it."""
        if self.policy.reference:
            rng = self.policy.stream.live()
            return RowRandom(rng, rng.get_state())
        return RowRandom(self.sample_rng(unit_id, *position), None)

    def sample_rng(self, unit_id: int, *position: int) -> RandomSource:
        """A generator owned by one row: the same wherever and whenever it is rebuilt.

        In compat mode, the worker's shared stream instead (the reference's globals); a row
        that must be rebuilt later takes its state with it through `row_random`."""
        if self.policy.reference:
            return self.policy.stream.live()
        key = [self.epoch_seed & 0xFFFFFFFF, stable_hash(self.name), int(unit_id), *position]
        key += seed_tail(self.epoch_seed)  # a seed beyond 32 bits: its higher words (none for others)
        return SeededRandom(np.random.PCG64(np.random.SeedSequence(key)))
