"""What a family reads next, for the read-ahead (`sources/read_ahead.py`).

`ReadsAhead` is mixed into `DistributedIterableDataset`: it walks the worker's units in the
order `iter_samples` will (phases, work items, the resume cursor), turns each into the
family's read tasks, and gives the family `open_parquet` (a `ParquetReader`, or the
read-ahead's view of the same file) to read through. A family that declares nothing
(`read_tasks` yields no task) simply reads inline, as before.

On resume, `prefetch_rows` fetches the rows a checkpoint's buffer will rebuild, grouped by
file: each file opened once, the files in parallel.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..sharding import INHERITED_PHASE, WorkerShard, phase_work
from ..sources import parquet_ahead
from ..sources.parquet import ParquetReader
from ..sources.read_ahead import ReadAhead


def phase_units(work, start) -> Iterator[tuple[int, Any, Any, Any]]:
    """(index, unit id, pass, first row) of a phase's work list from `start` (a position:
    `[index, *row]`, or None for the whole list): the walk the stream and its read plan share."""
    first = start[0] if start else 0
    for index in range(first, len(work)):
        unit_id, pass_index, row_start = work.item(index)
        if start and index == first and len(start) > 1:
            row_start = tuple(start[1:])
        yield index, unit_id, pass_index, row_start


class ReadsAhead:
    """The read-ahead half of `DistributedIterableDataset` (which sets these attributes)."""

    restart_plan: Any
    epoch_units: Sequence[Any]

    # -- what families declare ---------------------------------------------------------
    def parquet_span(self, unit_id: int, row_start: tuple) -> tuple[str, int, int | None] | None:
        """Parquet families: (file, first row group, stop row group or None for the end)
        a unit's read covers from `row_start` on; None for a family without parquet."""
        return None

    def parquet_columns(self, names: Sequence[str]) -> Sequence[str] | None:
        """The columns the family reads from a file with schema `names`; None: none (the
        family counts the file as a schema skip without reading a row group)."""
        return None

    def read_tasks(self, unit_id: int, row_start: tuple, single: bool) -> Iterator:
        """The read tasks of one unit from `row_start` (only that row when `single`), in
        the order the family will take them."""
        span = self.parquet_span(unit_id, row_start)
        if span is None:
            return iter(())
        path, first, stop = span
        return parquet_ahead.file_tasks(
            path, first, first + 1 if single else stop, self.parquet_columns, self._opened_files()
        )

    def pin_rows(self, ahead: ReadAhead, row_keys: list[tuple]) -> None:
        """Fetch the rows at `row_keys` now, grouped by file (parquet families)."""
        files: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for unit_id, _, *row in row_keys:
            span = self.parquet_span(int(unit_id), tuple(row))
            if span is not None:
                files[span[0]][span[1]] += 1
        for path, groups in files.items():
            parquet_ahead.pin_file(ahead, path, dict(groups), self.parquet_columns, self._opened_files())

    # -- what families call --------------------------------------------------------------
    def open_parquet(self, path: str):
        """The parquet file at `path` to read from: through the read-ahead while one runs."""
        ahead = self.active_read_ahead()
        if ahead is None:
            return ParquetReader(path)
        return parquet_ahead.open_ahead(path, ahead, self._opened_files(), stream=not self.rebuilding())

    def rebuilding(self) -> bool:
        """Inside `sample_at`: reads are a resumed row's (pinned), not the stream's."""
        return bool(getattr(self.thread_state(), "rebuilding", False))

    def thread_state(self) -> threading.local:
        """What this thread is doing with the family (a rebuild, a row's fetched media): a
        resume rebuilds buffered rows on several threads at once (`packing/rebuild.py`)."""
        return self._process_state().setdefault("thread", threading.local())

    def active_read_ahead(self) -> ReadAhead | None:
        return self._process_state().get("read_ahead")

    def io_lock(self) -> threading.Lock:
        """A lock for a reader the family shares between its own thread and the read-ahead's
        (a JSONL index's file handles)."""
        return self._process_state().setdefault("io_lock", threading.Lock())

    def _process_state(self) -> dict:
        """This process's read-ahead, lock and open files. A fork copies the parent's as
        they were: threads gone, a lock possibly held, files sharing their position with
        the parent. A child makes its own and keeps the copies without ever touching them:
        freeing one would close a file, and closing takes a lock that may be held."""
        held = self.__dict__.get("_per_process")
        if held is None or held[0] != os.getpid():
            if held is not None:
                self.__dict__.setdefault("_forked_away", []).append(held)
            held = self.__dict__["_per_process"] = (os.getpid(), {})
        return held[1]

    # -- lifecycle -------------------------------------------------------------------------
    def start_read_ahead(self, budget_bytes: int) -> ReadAhead | None:
        """This process's read-ahead (made now if need be); None when `budget_bytes` is 0."""
        if budget_bytes <= 0:
            return None
        ahead = self.active_read_ahead()
        if ahead is None or ahead.closed or ahead.budget != budget_bytes:
            self.stop_read_ahead()
            self.io_lock()  # made here, before any read-ahead thread can race to make it
            ahead = ReadAhead(budget_bytes)
            files = self._opened_files()
            ahead.on_close(lambda: parquet_ahead.close_all(files))
            self._process_state()["read_ahead"] = ahead
        return ahead

    def stop_read_ahead(self) -> None:
        """Stop this process's read-ahead (its threads end; its stats stay readable)."""
        ahead = self.active_read_ahead()
        if ahead is not None:
            ahead.close()

    def follow_stream(self, budget_bytes: int, shard: WorkerShard, phase: int, start) -> Callable[[], None]:
        """Read ahead of the stream `iter_samples` is about to walk from (phase, start);
        returns what stops it when that stream ends. A newer stream of the same family (a
        second `iter()`) takes the read-ahead over: the older one's end leaves it running."""
        ahead = self.start_read_ahead(budget_bytes)
        if ahead is None:
            return lambda: None
        plan = self._read_plan(shard, phase, start)
        ahead.follow(plan)

        def stop() -> None:
            if ahead.following is plan:
                ahead.close()  # kept: `read_ahead_stats` still reports what it did

        return stop

    def prefetch_rows(self, cursors: list[tuple], budget_bytes: int) -> None:
        """Resume: fetch the rows at `cursors` (a checkpoint's buffer) at once, grouped by
        file, so that rebuilding them (`sample_at`) waits for one round of reads."""
        ahead = self.start_read_ahead(budget_bytes)
        if ahead is not None and cursors:
            self.pin_rows(ahead, [self.row_key(cursor) for cursor in cursors])

    def read_ahead_stats(self) -> dict | None:
        ahead = self.active_read_ahead()
        return None if ahead is None else ahead.stats()

    def _opened_files(self) -> weakref.WeakSet:
        return self._process_state().setdefault("files", weakref.WeakSet())

    def __getstate__(self) -> dict:
        # Threads, locks and open files stay in the process that made them.
        state = self.__dict__.copy()
        for name in ("_per_process", "_forked_away"):
            state.pop(name, None)
        return state

    # -- the walk ----------------------------------------------------------------------------
    def _read_plan(self, shard: WorkerShard, phase: int, start) -> Iterator:
        for unit_id, row_start, single in self._read_plan_units(shard, phase, start):
            tasks = 0
            for task in self.read_tasks(unit_id, row_start, single):
                tasks += 1
                yield task
            if not tasks:  # a family (or unit kind) that reads nothing ahead: stop walking
                return

    def _read_plan_units(self, shard: WorkerShard, phase: int, start) -> Iterator[tuple[int, tuple, bool]]:
        """(unit id, first row, single row?) in the order `_iter_phase` reads them, phase
        after phase; it ends where the stream would find a whole pass empty."""
        while True:
            count = 0
            if phase == INHERITED_PHASE:
                refs = self.restart_plan.inherited_for(*shard.global_worker)
                for index in range(start[0] if start else 0, len(refs)):
                    unit_id, _, *row = refs[index]
                    count += 1
                    yield int(unit_id), tuple(row), True
            else:
                for _, unit_id, _, row_start in phase_units(phase_work(shard, self.restart_plan, phase), start):
                    count += 1
                    yield int(unit_id), tuple(row_start), False
            if phase >= 0 and not count and start is None:
                return
            start = None
            phase = self._next_phase(phase)

    # Provided by DistributedIterableDataset.
    def _next_phase(self, phase: int) -> int:
        raise NotImplementedError

    def row_key(self, cursor: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError
