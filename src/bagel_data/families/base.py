"""The base of every family: its parts, and iteration by phases, cursors, exact resume.

A family implements `get_data_paths` (its units) and `_unit_samples` (the good rows of one
unit). It *holds* its parts: `units` (`families/unit_plan.py`: epoch order, which rank and
worker reads what, the restart plan, each row's generator, and the unit kind), `reads`
(`families/reads.py`) and `skip_log`. This class walks a worker's units in phases and keeps
the cursors that make resume exact; the reference's attribute names (`data_paths`,
`set_epoch`, `get_data_paths_per_worker`, `num_files_per_rank`, ...) stay faces over `units`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from ..compat import CompatPolicy
from ..errors import SkipLog
from ..media.safe_read import ALLOWED_IMAGE_FORMATS, check_image_formats
from ..sample import sample_length, with_tensors
from ..schema.kinds import Field
from ..sharding import WorkerShard, row_key_at
from ..sources import storage
from .group_args import GroupArgs
from .positions import data_status_cursor
from .reads import FamilyReads, ReadSource
from .samples import built, empty_pass_error, phase_samples, rebuilt
from .unit_plan import UnitPlan
from .walk import first_phase, phase_items, walk


class DistributedIterableDataset(torch.utils.data.IterableDataset):
    """Base of the families: their samples in order, from any cursor, rebuilt exactly."""

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
        image_formats: Sequence[str] | None = None,
    ):
        # The entrance's policy (shared with the packer and the other groups), or a new
        # one for a family built on its own: sharding, file order, rules and random source.
        self.policy = CompatPolicy.of(compat)
        self.units = UnitPlan(dataset_name, local_rank, world_size, num_workers, self.policy)
        self.dataset_name = dataset_name
        self.local_rank, self.world_size, self.num_workers = local_rank, world_size, num_workers
        self.rng = random.Random()  # the reference's; only ever re-seeded by set_epoch
        self.num_files_per_rank = 0  # the reference's: this rank's unit count (set_epoch)
        self.data_status: Any = None  # the reference's per-worker resume positions (the family's argument)
        # (size, mtime_ns) of input files from their folders' listings, set by the parquet
        # families: travels to the workers, so none of them asks the store for each file.
        self.listed_files: dict[str, tuple[int, int | None]] = {}
        self.strict = bool(strict)  # raise on the first bad row instead of skipping it
        # Rows may name media outside the dataset's folders only when the config opts in.
        self.allow_outside_root = bool(allow_outside_root)
        # The decoders the default mode may use: the allowlist, widened by `image_formats`
        # (compat mode opens every format the reference's Image.open does: reference_images.py).
        self.image_formats = (
            ALLOWED_IMAGE_FORMATS if image_formats is None else check_image_formats("image_formats", image_formats)
        )
        self.max_consecutive_failures = int(max_consecutive_failures)
        self.skip_log = SkipLog(dataset_name, self.strict, self.max_consecutive_failures)
        self.reads = FamilyReads()  # its IO: inline, or its read-ahead while one runs
        self._input_record: dict | None = None
        self._reads_remote: bool | None = None

    # -- the reference's names, over `units` ---------------------------------------------
    @property
    def data_paths(self) -> Any:
        """The family's units: a list, or a JSONL family's `JsonlIndex`."""
        return self.units.data_paths

    @data_paths.setter
    def data_paths(self, units: Any) -> None:
        self.units.data_paths = units

    @property
    def restart_plan(self):
        """The elastic restart's plan of this group (`checkpoint/restart.py`), or None."""
        return self.units.restart_plan

    @restart_plan.setter
    def restart_plan(self, plan) -> None:
        self.units.restart_plan = plan

    @property
    def compat(self) -> str | None:
        """None (the default mode) or "bagel"."""
        return self.policy.mode

    def get_data_paths(self, *args, **kwargs):
        raise NotImplementedError

    def set_epoch(self, seed: int = 42) -> None:
        if self.data_paths is None:
            return
        self.rng.seed(seed)
        self.units.set_epoch(seed)
        self.num_files_per_rank = len(self.units.rank_unit_ids)

    @property
    def epoch_units(self) -> Sequence[Any]:
        """The units in this epoch's order (`UnitPlan.epoch_units`)."""
        return self.units.epoch_units

    @property
    def data_paths_per_rank(self) -> list:
        return self.units.rank_units()

    def get_data_paths_per_worker(self):
        """The reference's view: (this worker's units, worker id)."""
        return self.units.worker_units()

    def worker_shard(self) -> WorkerShard:
        """This process's share of the units (`UnitPlan.worker_shard`)."""
        return self.units.worker_shard()

    def sample_rng(self, unit_id: int, *position: int):
        """The generator of the row at `(unit_id, *position)` (`UnitPlan.sample_rng`)."""
        return self.units.sample_rng(unit_id, *position)

    def new_skip_log(self) -> SkipLog:
        self.skip_log = SkipLog(self.dataset_name, self.strict, self.max_consecutive_failures)
        return self.skip_log

    # -- what families implement -----------------------------------------------------------
    # A row is addressed by (global unit id, pass, *row within the unit); the row within is
    # `(row group, row)` for T2I, `(row,)` for edit and `()` for VLM (a unit is one line).
    # The per-sample randomness is keyed by exactly that address, so a row gives the same
    # sample whichever worker reads it.

    # True where `sample_at` may run on several threads at once (resume rebuilds a buffer's
    # rows in parallel, `packing/rebuild.py`): the row's state lives in locals or in
    # `thread_state()`, never in attributes. A family of a user's stays one at a time.
    parallel_rebuild = False

    def _unit_samples(self, unit_id: int, pass_index: int, start: tuple, log: SkipLog, single: bool = False):
        """Yield `(row within the unit, SampleBuilder, random state)` for the good rows from
        `start` on (or, when `single`, for the row at `start` only); bad rows are counted in
        `log`. The random state is `row_random(...).state`: in compat mode the stream's
        state before the row's draws (a buffered sample is rebuilt from it), else None."""
        raise NotImplementedError

    # -- configuration (`families/group_args.py`) -------------------------------------------
    # The family's own keys, each a schema `Field` (kind, default, meaning): the group keys
    # it accepts beyond every group's, the `dataset_info` keys it reads beyond every entry's
    # (`schema/sections.py`); config checks them and the generated page lists them
    # (`families/registry.py`). And which model input its `image_transform_args` sizes
    # ("vae" or "vit": the position table an image side must fit).
    GROUP_FIELDS: ClassVar[dict[str, Field]] = {}
    DATASET_INFO_FIELDS: ClassVar[dict[str, Field]] = {}
    IMAGE_TRANSFORM_KIND: ClassVar[str] = "vae"

    @classmethod
    def group_kwargs(cls, group: GroupArgs) -> dict:
        """The constructor's keywords beyond those every family takes (`config.parse_group`),
        read from the group's checked config; mistakes raise a `ConfigError`."""
        return {}

    def read_source(self) -> ReadSource | None:
        """What one unit reads, as read-ahead tasks (`families/reads.py`); None reads inline."""
        return None

    def data_index(self, position: list[int]):
        """The sample's `data_indexes` (the reference's position) for a position in a phase."""
        return list(position)

    # -- iteration -----------------------------------------------------------------------
    # A cursor is `(phase, *position)`; `families/walk.py` gives the order of phases and units.

    def iter_pass(self, log: SkipLog, pass_index: int = 0, shard: WorkerShard | None = None):
        """Yield `(position, sample)` for one full pass over `shard` (default: this process's).

        Skipped rows are counted in `log`. Unlike `iter(dataset)`, this stops after the pass
        and ignores any restart plan or resume cursor: `bagel-data validate` walks the data
        with it. Images are float tensors, as from `iter(dataset)`.
        """
        shard = self.worker_shard() if shard is None else shard
        items = phase_items(shard, self.restart_plan, pass_index, None)
        for position, sample in phase_samples(self, shard, items, log):
            yield position, with_tensors(sample)

    def row_location(self, row_key: tuple) -> str:
        """Where the row at `row_key` (see `_build`) lives: file and row (or line)."""
        unit_id, _, *row = row_key
        return self.units.kind.location(self.units.unit(unit_id), tuple(row))

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
        sample = rebuilt(self, cursor, rng_state, self.new_skip_log() if log is None else log)
        return sample if sample is None or pending else with_tensors(sample)

    def unit_samples(self, shard: WorkerShard, index: int, unit_id: int, log: SkipLog):
        """The samples of one unit (item `index` of `shard`'s first pass), bad rows counted in
        `log`: what `bagel-data validate` walks, unit by unit, to find empty units."""
        for row, builder, rng_state in self._unit_samples(unit_id, 0, (), log):
            yield built(self, builder, shard, [index, *row], (unit_id, 0, *row), rng_state)

    def worst_case_rows(self, shard: WorkerShard, index: int, unit_id: int, log: SkipLog):
        """`(location, longest length)` of every usable row of one unit: what `bagel-data
        validate` holds against `max_num_tokens_per_sample`. A row whose random choices can
        change its length must report the longest it can give; this default measures the
        sample the run would build, right for rows without such choices. Families with
        choices override it (T2I captions, edit stretches, video frame counts, parse_row)."""
        for sample in self.unit_samples(shard, index, unit_id, log):
            yield self.row_location(sample["row_key"]), sample_length(sample)

    def iter_samples(
        self,
        after: tuple[int, ...] | None = None,
        log: SkipLog | None = None,
        pending: bool = False,
        read_ahead: int = 0,
    ):
        """Yield `(cursor, sample)` forever, starting just after cursor `after`.

        Bad rows are counted in `log` (a fresh one when None). With `pending` (the packer's
        path) images stay `PendingImage`s, converted straight into the batch; otherwise
        `image_tensor_list` holds float `(C, H, W)` tensors. `read_ahead`: bytes this
        stream may fetch ahead on a few threads (`families/reads.py`); 0 reads inline.
        """
        shard = self.worker_shard()
        if log is None:
            log = self.new_skip_log()
        self.skip_log = log
        if self.policy.reference and self.policy.stream.rng is None:
            self.policy.start_stream(self.units.epoch_seed)
        phase, start = first_phase(self.restart_plan), None
        if after is not None:
            phase, start = after[0], [*after[1:-1], after[-1] + 1]  # just after `after`
        stop_reading_ahead = self.follow_stream(read_ahead, shard, phase, start)
        try:
            for step in walk(shard, self.restart_plan, phase, start):
                produced, skipped = 0, log.total()
                for position, sample in phase_samples(self, shard, step.items, log):
                    log.ok()
                    produced += 1
                    yield (step.number, *position), (sample if pending else with_tensors(sample))
                if step.whole and step.number >= 0 and not produced and log.total() == skipped:
                    raise empty_pass_error(self, shard)
        finally:
            stop_reading_ahead()  # its threads stop with the stream

    # -- reads (`families/reads.py`) ---------------------------------------------------------
    def follow_stream(self, budget_bytes: int, shard: WorkerShard, phase: int, start):
        """Read ahead, within `budget_bytes`, of the stream about to walk from (phase,
        start); returns what stops it when that stream ends."""
        return self.reads.follow(budget_bytes, self.read_source(), walk(shard, self.restart_plan, phase, start))

    def prefetch_rows(self, cursors: list[tuple], budget_bytes: int) -> None:
        """Resume: fetch the rows at `cursors` (a checkpoint's buffer) at once, grouped by
        file, so that rebuilding them (`sample_at`) waits for one round of reads."""
        if budget_bytes > 0 and cursors:
            self.reads.prefetch(budget_bytes, self.read_source(), [self.row_key(cursor) for cursor in cursors])

    def media_folders(self) -> Sequence[str]:
        """The folders this group reads media from beside its inputs (a JSONL family's image
        folders); none where the media lie in the inputs themselves."""
        return self.units.kind.media_folders(self.data_paths)

    def reads_remote(self) -> bool:
        """Whether this group reads files over a network (an object store, HDFS, a URI of
        fsspec's): its inputs, or the folders its media are read from. Reading ahead pays
        there; on local disk it buys nothing (`Settings.stream_read_ahead`)."""
        if self._reads_remote is None:
            paths = [*self.units.kind.input_paths(self.data_paths), *self.media_folders()]
            self._reads_remote = any(storage.is_remote(str(path)) for path in paths)
        return self._reads_remote

    def input_record(self) -> dict:
        """`checkpoint.inputs.input_record` of this group's files, computed once per process."""
        if self._input_record is None:
            from ..checkpoint.inputs import input_record

            paths = self.units.kind.input_paths(self.data_paths)
            self._input_record = input_record([str(path) for path in paths], self.listed_files)
        return self._input_record

    def stop_read_ahead(self) -> None:
        self.reads.stop()

    def read_ahead_stats(self) -> dict | None:
        return self.reads.stats()

    def resume_cursor(self, worker_id: int) -> tuple[int, ...] | None:
        """The reference's `data_status` entry of a worker as a checked cursor in the first
        pass (`families/positions.py`)."""
        return data_status_cursor(self, worker_id)

    def __iter__(self):
        after = self.resume_cursor(self.worker_shard().worker_id)
        if self.policy.reference:  # iterated on its own: the stream is this family's alone
            self.policy.start_stream(self.units.epoch_seed)
        for _, sample in self.iter_samples(after):
            yield sample
