"""A family's units: their epoch order, which rank and worker reads which, and the random
generator each sample owns.

`UnitDataset` is the base of `DistributedIterableDataset` (`families/base.py`), which walks
these units in phases and resumes exactly; the unit arithmetic itself is `sharding.py`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..compat import CompatPolicy
from ..compat.streams import seed_tail
from ..errors import ConfigError, SkipLog
from ..sharding import WorkerShard, WorkerTopology, stable_hash
from ..sources import storage

if TYPE_CHECKING:
    from ..checkpoint.restart import GroupRestart
    from .parquet_units import ParquetListing


@dataclasses.dataclass(frozen=True)
class RowRandom:
    """A row's generator and, in compat mode, the shared stream's state before its draws
    (None otherwise: a row's own generator is made again from its address)."""

    rng: Any
    state: dict | None


class UnitDataset(torch.utils.data.IterableDataset):
    """The unit half of every family: units, epoch shuffling, rank/worker sharding, and the
    per-sample generators. `DistributedIterableDataset` (families/base.py) adds iteration."""

    # Set by `set_epoch` once the family has its units; `data_status` by each family's
    # constructor (the reference's per-worker resume positions, or None).
    rank_unit_ids: range
    num_files_per_rank: int
    data_status: list | None
    # What a parquet family listed (`families/parquet_units.py`); None for the others.
    parquet_listing: ParquetListing | None = None

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
        allow_outside_root: bool = False,
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
        # (size, mtime_ns) of input files from their folders' listings, set by the parquet
        # families: travels to the workers, so none of them asks the store for each file.
        self.listed_files: dict[str, tuple[int, int | None]] = {}
        self._reads_remote: bool | None = None  # `reads_remote`, found on first use
        self.epoch_seed = 42
        # The epoch order and what it was made from (seed, units object, count): `epoch_units`
        # makes it on first use, so the constructor's set_epoch(42) and an entrance's repeated
        # set_epoch(data_seed) cost one shuffle, not one each.
        self._epoch_units: Sequence[Any] | None = None
        self._epoch_key: tuple | None = None
        self.strict = bool(strict)  # raise on the first bad row instead of skipping it
        # Rows may name media outside the dataset's folders only when the config opts in.
        self.allow_outside_root = bool(allow_outside_root)
        self.max_consecutive_failures = int(max_consecutive_failures)
        self.skip_log = SkipLog(dataset_name, self.strict, self.max_consecutive_failures)
        self.restart_plan: GroupRestart | None = None  # set by an elastic restart (restart.py)
        # The entrance's policy (shared with the packer and the other groups), or a new
        # one for a family built on its own: sharding, file order, rules and random source.
        self.policy = CompatPolicy.of(compat)

    @property
    def compat(self) -> str | None:
        """The reference's attribute: None (the default mode) or "bagel"."""
        return self.policy.mode

    # -- units -------------------------------------------------------------------------
    def get_data_paths(self, *args, **kwargs):
        raise NotImplementedError

    def sorted_units(self) -> list:
        """The units in their canonical (sorted) order; families may override."""
        return sorted(self.data_paths)

    def set_epoch(self, seed: int = 42) -> None:
        if self.data_paths is None:
            return
        num_units = len(self.data_paths)  # sorted_units() holds each unit once
        self.rng.seed(seed)
        self.epoch_seed = seed
        self.rank_unit_ids = self._rank_ids(num_units)
        self.num_files_per_rank = len(self.rank_unit_ids)
        self._check_enough_units(num_units, self.num_workers)

    @property
    def epoch_units(self) -> Sequence[Any]:
        """The units in this epoch's order: the canonical order shuffled by `epoch_seed`."""
        key = (self.epoch_seed, id(self.data_paths), len(self.data_paths))
        if self._epoch_units is None or self._epoch_key != key:
            units = self.sorted_units()
            # random.shuffle swaps items by index only: a numpy array's memoryview gets the
            # same permutation as a list would, without a numpy scalar per swap.
            view = memoryview(units) if isinstance(units, np.ndarray) else units
            random.Random(self.epoch_seed).shuffle(view)
            self._epoch_units, self._epoch_key = units, key
        return self._epoch_units

    @epoch_units.setter
    def epoch_units(self, units: Sequence[Any]) -> None:
        self._epoch_units = units
        self._epoch_key = (self.epoch_seed, id(self.data_paths), len(self.data_paths))

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
        return self.policy.worker_shard(topology, len(self.epoch_units))

    def _rank_ids(self, num_units: int) -> range:
        return self.policy.rank_unit_ids(num_units, self.world_size, self.local_rank)

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

    def reads_remote(self) -> bool:
        """Whether this group reads files over a network (an object store, HDFS, a URI of
        fsspec's): its inputs, or the folders its media are read from. Reading ahead pays
        there; on local disk it buys nothing (`Settings.stream_read_ahead`)."""
        if self._reads_remote is None:
            paths = [*self.input_paths(), *self.media_folders()]
            self._reads_remote = any(storage.is_remote(str(path)) for path in paths)
        return self._reads_remote

    def media_folders(self) -> Sequence[str]:
        """The folders this group reads media from beside its inputs (a JSONL family's image
        folders); none where the media lie in the inputs themselves."""
        return ()

    def input_record(self) -> dict:
        """`checkpoint.inputs.input_record` of this group's files, computed once per process."""
        if getattr(self, "_input_record", None) is None:
            from ..checkpoint.inputs import input_record

            self._input_record = input_record(
                [str(path) for path in self.input_paths()], getattr(self, "listed_files", None)
            )
        return self._input_record

    def unit_label(self, unit_id: int) -> str:
        """The unit at `unit_id` of the epoch order, as error messages name it."""
        return str(self.epoch_units[unit_id])

    # -- positions (`families/positions.py`) -------------------------------------------------
    def row_depth(self) -> int | None:
        """How many ints address a row within a unit (`_unit_samples`' row); None: unknown."""
        return None

    def row_extent(self, unit_id: int, row: tuple) -> tuple[str, int, str] | None:
        """The level of a row address after `row` within unit `unit_id`: (its name, how many
        entries it holds, where that is), e.g. ("row group", 3, "a.parquet") for `row` ();
        None where the family cannot tell (a unit of one line has no levels)."""
        return None

    def reference_units_mismatch(self) -> str | None:
        """Why the reference would have taken other units than this group's (None: the same)."""
        listing = self.parquet_listing
        if listing is None:
            return None
        if "_reference_units_mismatch" not in self.__dict__:  # lists the folders again: once
            self._reference_units_mismatch = listing.reference_mismatch()
        return self._reference_units_mismatch

    # -- per-sample randomness -----------------------------------------------------------
    def row_random(self, unit_id: int, *position: int) -> RowRandom:
        """The generator one sample draws from, and (compat mode) the state to rebuild it."""
        if self.policy.reference:
            rng = self.policy.stream.live()
            return RowRandom(rng, rng.get_state())
        return RowRandom(self.sample_rng(unit_id, *position), None)

    def sample_rng(self, unit_id: int, *position: int) -> Any:
        """A generator owned by one sample: the same wherever and whenever it is rebuilt.

        In compat mode, the worker's shared stream instead (the reference's globals); a row
        that must be rebuilt later takes its state with it through `row_random`."""
        if self.policy.reference:
            return self.policy.stream.live()
        key = [self.epoch_seed & 0xFFFFFFFF, stable_hash(self.dataset_name), int(unit_id), *position]
        key += seed_tail(self.epoch_seed)  # a seed beyond 32 bits: its higher words (none for others)
        return np.random.default_rng(np.random.SeedSequence(key))

    def new_skip_log(self) -> SkipLog:
        self.skip_log = SkipLog(self.dataset_name, self.strict, self.max_consecutive_failures)
        return self.skip_log
