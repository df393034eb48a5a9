"""The base class of every family: iteration by phases, cursors, exact resume.

A family implements `get_data_paths` (its units) and `_unit_samples` (the good rows of one
unit); `UnitDataset` (`families/units.py`) owns the epoch order, which worker reads what,
and the per-sample random generators; this class walks a worker's units in phases and
keeps the cursors that make resume exact.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import BagelDataError, EmptyWorkerError, ResumeError, SkipLog, SkipReason
from ..sample import sample_length, with_tensors
from ..sharding import WorkerShard, row_key_at
from .group_args import GroupArgs
from .positions import data_status_cursor, tagged
from .reads import FamilyReads, ReadSource
from .row_plan import draw_row
from .units import UnitDataset
from .walk import first_phase, phase_items, piece_walk, walk


class DistributedIterableDataset(UnitDataset):
    """Base of the families: their samples in order, from any cursor, rebuilt exactly."""

    # -- what families implement -----------------------------------------------------------
    # A row is addressed by (global unit id, pass, *row within the unit); the row within is
    # `(row group, row)` for T2I, `(row,)` for edit and `()` for VLM (a unit is one line).
    # The per-sample randomness is keyed by exactly that address, so a row gives the same
    # sample whichever worker reads it.

    # True where `sample_at` may run on several threads at once (resume rebuilds a buffer's
    # rows in parallel, `packing/rebuild.py`): the row's state lives in locals or in
    # `thread_state()`, never in attributes. A family of a user's stays one at a time.
    parallel_rebuild: ClassVar[bool] = False

    def _unit_samples(self, unit_id: int, pass_index: int, start: tuple, log: SkipLog, single: bool = False):
        """Yield `(row within the unit, SampleBuilder, random state)` for the good rows from
        `start` on (or, when `single`, for the row at `start` only); bad rows are counted in
        `log`. The random state is `row_random(...).state`: in compat mode the stream's
        state before the row's draws (a buffered sample is rebuilt from it), else None."""
        raise NotImplementedError

    # -- configuration (`families/group_args.py`) -------------------------------------------
    # The group keys the family accepts beyond the common ones, the `dataset_info` keys it
    # reads beyond `data_dir`, and which model input its `image_transform_args` sizes
    # ("vae" or "vit": the position table an image side must fit).
    GROUP_KEYS: ClassVar[frozenset] = frozenset()
    DATASET_INFO_KEYS: ClassVar[frozenset] = frozenset()
    IMAGE_TRANSFORM_KIND: ClassVar[str] = "vae"

    @classmethod
    def group_kwargs(cls, group: GroupArgs) -> dict:
        """The constructor's keywords beyond those every family takes (`config.parse_group`),
        read from the group's checked config; mistakes raise a `ConfigError`."""
        return {}

    def read_source(self) -> ReadSource | None:
        """What one unit reads, as read-ahead tasks (`families/reads.py`); None reads inline."""
        return None

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
    # A cursor is `(phase, *position)`; `families/walk.py` gives the order of phases and units.

    def _iter_phase(self, shard: WorkerShard, items, log: SkipLog, phase: int | None = None):
        """Yield `(position, sample)` for the work items of one phase (`walk.phase_items`)."""
        pieces: dict = {}  # the walk by rows: each open piece's row reader
        try:
            yield from self._iter_items(shard, items, log, pieces, phase)
        finally:
            for reader, _ in pieces.values():
                reader.close()

    def _iter_items(self, shard: WorkerShard, items, log: SkipLog, pieces: dict, phase: int | None):
        for item in items:
            if item.draw is not None:  # one row of an open piece (families/row_plan.py)
                found = draw_row(self._unit_samples, item, pieces, log)
                if found is not None:
                    row, builder, rng_state = found
                    yield [item.index], self._build(builder, shard, [item.index], item.row_key, rng_state, phase)
                continue
            if item.single:  # a row an old topology had buffered (elastic restart)
                before = log.total()
                sample = self._sample_at_row(shard, item.row_key, [item.index], log, phase)
                if sample is None and log.total() > before:
                    continue  # e.g. its media is gone since: a counted skip
                if sample is None:  # it was a good sample when the old worker buffered it
                    raise ResumeError(
                        f"{self.dataset_name}: the buffered row {item.row_key} (unit, pass, row) no longer gives "
                        "a sample; the data changed since the checkpoint"
                    )
                yield [item.index], sample
                continue
            for row, builder, rng_state in self._unit_samples(item.unit_id, item.pass_index, item.row_start, log):
                position = [item.index, *row]
                row_key = (item.unit_id, item.pass_index, *row)
                yield position, self._build(builder, shard, position, row_key, rng_state)

    def iter_pass(self, log: SkipLog, pass_index: int = 0, shard: WorkerShard | None = None):
        """Yield `(position, sample)` for one full pass over `shard` (default: this process's).

        Skipped rows are counted in `log`. Unlike `iter(dataset)`, this stops after the pass
        and ignores any restart plan or resume cursor: `bagel-data validate` walks the data
        with it. Images are float tensors, as from `iter(dataset)`.
        """
        shard = self.worker_shard() if shard is None else shard
        items = phase_items(shard, self.restart_plan, pass_index, None)
        for position, sample in self._iter_phase(shard, items, log, pass_index):
            yield position, with_tensors(sample)

    def _build(self, builder, shard: WorkerShard, position: list[int], row_key: tuple, rng_state, phase=None) -> dict:
        # The walk by rows names a sample by its whole cursor (a draw index repeats each round).
        index = [phase, *position] if shard.rows is not None and phase is not None else self.data_index(position)
        sample = builder.build(tagged(self, shard, index), shard.worker_id, self.dataset_name)
        sample["row_key"] = row_key  # where it came from, whatever the topology
        if self.policy.reference:
            sample["compat_rng_state"] = rng_state  # the stream before this row's draws
        return sample

    def _sample_at_row(
        self, shard: WorkerShard, row_key: tuple, position: list[int], log: SkipLog, phase: int | None = None
    ) -> dict | None:
        unit_id, pass_index, *row = row_key
        for found, builder, rng_state in self._unit_samples(unit_id, pass_index, tuple(row), log, single=True):
            if list(found) == row:
                return self._build(builder, shard, position, tuple(row_key), rng_state, phase)
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
        here = self.reads.thread_state()
        here.rebuilding = True  # its reads are served by `prefetch_rows`, not the stream's
        try:
            return self._rebuild_row(cursor, rng_state, log)
        finally:
            here.rebuilding = False

    def _rebuild_row(self, cursor: tuple[int, ...], rng_state: dict | None, log: SkipLog) -> dict | None:
        if not self.policy.reference:
            return self._sample_at_row(self.worker_shard(), self.row_key(cursor), list(cursor[1:]), log, cursor[0])
        if rng_state is None:
            raise ResumeError(
                f'{self.dataset_name}: compat="bagel" rebuilds a sample from the stream state before its row; '
                f"none was given for cursor {list(cursor)}"
            )
        with self.policy.stream.replaying(rng_state):
            return self._sample_at_row(self.worker_shard(), self.row_key(cursor), list(cursor[1:]), log)

    def unit_samples(self, shard: WorkerShard, index: int, unit_id: int, log: SkipLog):
        """The samples of one unit (item `index` of `shard`'s first pass), bad rows counted in
        `log`: what `bagel-data validate` walks, unit by unit, to find empty units."""
        for row, builder, rng_state in self._unit_samples(unit_id, 0, (), log):
            yield self._build(builder, shard, [index, *row], (unit_id, 0, *row), rng_state)

    def worst_case_rows(self, shard: WorkerShard, index: int, unit_id: int, log: SkipLog):
        """`(location, longest length)` of every usable row of one unit: what `bagel-data
        validate` holds against `max_num_tokens_per_sample`. A row whose random choices can
        change its length must report the longest it can give; this default measures the
        sample the run would build, right for rows without such choices. Families with
        choices override it (T2I captions, edit stretches, video frame counts, parse_row)."""
        for sample in self.unit_samples(shard, index, unit_id, log):
            yield self.row_location(sample["row_key"]), sample_length(sample)

    @staticmethod
    def _position_after(position: list[int]) -> list[int]:
        """The first position to read when resuming just after `position`."""
        return [*position[:-1], position[-1] + 1]

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
            self.policy.start_stream(self.epoch_seed)
        phase, start = first_phase(self.restart_plan), None
        if after is not None:
            phase, start = after[0], self._position_after(list(after[1:]))
        stop_reading_ahead = self.follow_stream(read_ahead, shard, phase, start)
        try:
            for step in walk(shard, self.restart_plan, phase, start):
                produced, skipped = 0, log.total()
                for position, sample in self._iter_phase(shard, step.items, log, step.number):
                    log.ok()
                    produced += 1
                    yield (step.number, *position), (sample if pending else with_tensors(sample))
                if step.whole and step.number >= 0 and not produced and log.total() == skipped:
                    raise self._empty_pass_error(shard)
        finally:
            stop_reading_ahead()  # its threads stop with the stream

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

    # -- reads (`families/reads.py`) ---------------------------------------------------------
    @property
    def reads(self) -> FamilyReads:
        """The family's IO: inline reads, or its read-ahead while one runs."""
        held = self.__dict__.get("_reads")
        if held is None:
            held = self.__dict__["_reads"] = FamilyReads()
        return held

    def follow_stream(self, budget_bytes: int, shard: WorkerShard, phase: int, start):
        """Read ahead, within `budget_bytes`, of the stream about to walk from (phase,
        start); returns what stops it when that stream ends."""
        phases = piece_walk(walk(shard, self.restart_plan, phase, start))
        return self.reads.follow(budget_bytes, self.read_source(), phases)

    def prefetch_rows(self, cursors: list[tuple], budget_bytes: int) -> None:
        """Resume: fetch the rows at `cursors` (a checkpoint's buffer) at once, grouped by
        file, so that rebuilding them (`sample_at`) waits for one round of reads."""
        if budget_bytes > 0 and cursors:
            self.reads.prefetch(budget_bytes, self.read_source(), [self.row_key(cursor) for cursor in cursors])

    def open_parquet(self, path: str):
        """The parquet file at `path`, through the read-ahead while one runs."""
        return self.reads.open_parquet(path)

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
            self.policy.start_stream(self.epoch_seed)
        for _, sample in self.iter_samples(after):
            yield sample
