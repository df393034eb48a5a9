"""A family's reads: inline, or through a read-ahead (`sources/read_ahead.py`) it holds.

Each family holds one `FamilyReads` (`family.reads`). The family hands it the budget and the
walk its stream is about to take (`families/walk.py`), with a *source* that says what one
unit reads: `ParquetSource` (a file's footer and row groups) or `RowSource` (one task per
row, as a JSONL family's line and images). A family without a source reads inline, as
without read-ahead. The family then reads through `open_parquet` (a `ParquetReader`, or
the read-ahead's view of the same file) or `take`.

While the read-ahead waits on a file's footer, the walk's next units open their files
early (`openings`, up to `FILES_AHEAD` of them): many small files read as fast as a few
large ones.

On resume, `prefetch` fetches the rows a checkpoint's buffer will rebuild, grouped by file:
each file opened once, the files in parallel.

The read-ahead, its open files and the locks are this process's: a DataLoader worker makes
its own after the fork, and a pickled family carries none of them.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from ..sources import parquet_ahead
from ..sources.parquet import ParquetReader
from ..sources.read_ahead import PENDING, Early, ReadAhead, Task
from .walk import Phase, WorkItem

# How many of the walk's next units may open their files while the plan waits on a footer.
FILES_AHEAD = 8

# `span(unit id, first row)`: (file, first row group, stop row group or None for the end) a
# unit's read covers, or None where the unit is no parquet row group (a JSONL line).
SpanOf = Callable[[int, tuple], "tuple[str, int, int | None] | None"]


class ReadSource(Protocol):
    """What a family reads for one unit, as read-ahead tasks."""

    def unit_tasks(self, unit_id: int, row_start: tuple, single: bool, files: weakref.WeakSet) -> Iterator[Task]:
        """The tasks of one unit from `row_start` (that row only when `single`), in the
        order the family takes them; none stops the read-ahead's walk."""
        ...

    def pin(self, ahead: ReadAhead, row_keys: list[tuple], files: weakref.WeakSet) -> None:
        """Fetch the rows at `row_keys` (`(unit id, pass, *row)`) now, for a resume."""
        ...


class ParquetSource:
    """Parquet row groups: `span` of a unit, read with the columns `columns(schema names)`
    (None: the family reads none of that file, a counted schema skip)."""

    def __init__(self, span: SpanOf, columns: parquet_ahead.ColumnsFor):
        self.span, self.columns = span, columns
        self._footers: dict[str, Task] = {}  # made ahead by `openings`, taken by `unit_tasks`

    def unit_tasks(self, unit_id, row_start, single, files):
        found = self.span(unit_id, row_start)
        if found is None:
            return iter(())
        path, first, stop = found
        footer = self._footers.pop(path, None)
        return parquet_ahead.file_tasks(path, first, first + 1 if single else stop, self.columns, files, footer)

    def openings(self, items: Sequence[WorkItem], files: weakref.WeakSet) -> Iterator[Early]:
        """Hints to open the files of `items` (the walk's next units) now; a file whose
        footer was started already is not asked again."""
        for item in items:
            found = self.span(item.unit_id, item.row_start)
            if found is None:
                continue
            footer = self._footers.get(found[0])
            if footer is None:
                footer = self._footers[found[0]] = parquet_ahead.footer_task(found[0], files)
            if footer.future is None:
                yield Early(footer)

    def pin(self, ahead, row_keys, files):
        by_file: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for unit_id, _, *row in row_keys:
            found = self.span(int(unit_id), tuple(row))
            if found is not None:
                by_file[found[0]][found[1]] += 1
        for path, groups in by_file.items():
            parquet_ahead.pin_file(ahead, path, dict(groups), self.columns, files)


class RowSource:
    """One task per unit: `fetch(key)` with `key = key_of(unit id)`, counted at `estimate`
    bytes before it runs (a JSONL line and its images)."""

    def __init__(self, key_of: Callable[[int], Hashable], fetch: Callable[[Any], Any], estimate: int):
        self.key_of, self.fetch, self.estimate = key_of, fetch, estimate

    def _task(self, key) -> Task:
        return Task(("row", key), lambda: self.fetch(key), self.estimate)

    def unit_tasks(self, unit_id, row_start, single, files):
        yield self._task(self.key_of(unit_id))

    def pin(self, ahead, row_keys, files):
        for key, count in collections.Counter(self.key_of(int(row_key[0])) for row_key in row_keys).items():
            ahead.pin(self._task(key), {("row", key): (_same, count)})


def _same(value):
    return value


class _Walked:
    """The walk's phases and items in order, one at a time, with a look at the next items."""

    def __init__(self, phases: Iterable[Phase]):
        self._phases = iter(phases)
        self._items: Iterator[WorkItem] | None = None
        self._seen: collections.deque[Phase | WorkItem] = collections.deque()

    def _pull(self) -> bool:
        """One more phase or item into the look; False when the walk has ended."""
        if self._items is not None:
            item = next(self._items, None)
            if item is not None:
                self._seen.append(item)
                return True
            self._items = None
        phase = next(self._phases, None)
        if phase is None:
            return False
        self._items = phase.items
        self._seen.append(phase)
        return True

    def next(self) -> Phase | WorkItem | None:
        if not self._seen and not self._pull():
            return None
        return self._seen.popleft()

    def upcoming(self, count: int) -> list[WorkItem]:
        """The next `count` items, looking at most into the phase after the next (a walk of
        empty passes never ends)."""
        found: list[WorkItem] = []
        index = phases = 0
        while len(found) < count and (index < len(self._seen) or self._pull()):
            entry = self._seen[index]
            index += 1
            if isinstance(entry, Phase):
                phases += 1
                if phases > 2:
                    break
            else:
                found.append(entry)
        return found


def source_tasks(
    source: ReadSource,
    phases: Iterable[Phase],
    files: weakref.WeakSet,
    files_ahead: Callable[[], int] = lambda: FILES_AHEAD,
) -> Iterator:
    """The tasks of the units the stream walks, in its order; they end where the stream
    would find a whole pass empty, or at a unit that reads nothing ahead. While a unit
    waits on a footer, the next `files_ahead()` units' files are opened early (`Early`
    hints): more of them where the read-ahead measured a longer round trip."""
    walked = _Walked(phases)
    openings = getattr(source, "openings", None)  # a source of a user's may have none
    phase: Phase | None = None
    units = 0
    while (entry := walked.next()) is not None:
        if isinstance(entry, Phase):
            if phase is not None and phase.whole and phase.number >= 0 and not units:
                return
            phase, units = entry, 0
            continue
        units += 1
        tasks = 0
        for task in source.unit_tasks(entry.unit_id, entry.row_start, entry.single, files):
            if task is PENDING and openings is not None:
                yield from openings(walked.upcoming(files_ahead()), files)
            tasks += 1
            yield task
        if not tasks:
            return


class FamilyReads:
    """A family's IO in this process: its read-ahead while one runs, the files opened
    through it, a lock for readers shared with its threads, and per-thread state."""

    def __init__(self) -> None:
        self._per_process: tuple[int, dict] | None = None
        self._forked_away: list = []

    # -- reading -------------------------------------------------------------------------
    def open_parquet(self, path: str):
        """The parquet file at `path` to read from: through the read-ahead while one runs."""
        ahead = self.active()
        if ahead is None:
            return ParquetReader(path)
        return parquet_ahead.open_ahead(path, ahead, self._files(), stream=not self.rebuilding())

    def take(self, key: Hashable, fallback: Callable[[], Any], kind: str = "row") -> Any:
        """The value fetched ahead for task `(kind, key)` (a `RowSource` row by default, a
        tar's index or block: `families/t2i_tars.py`), or `fallback()` inline."""
        ahead = self.active()
        if ahead is None:
            return fallback()
        return ahead.take((kind, key), fallback, not self.rebuilding())

    def kept(self, key: Hashable, make: Callable[[], Any], limit: int = 8) -> Any:
        """`make()`, kept in this process for the next calls with `key` (the last `limit`
        keys): what a family opens once per file and reads often, as a tar's index. Safe
        from the read-ahead's threads: `make` runs outside the lock (two threads may both
        make a value; the first kept wins)."""
        here = self._here()
        held = here.setdefault("kept", collections.OrderedDict())
        lock = here.setdefault("kept_lock", threading.Lock())
        with lock:
            if key in held:
                held.move_to_end(key)
                return held[key]
        value = make()
        with lock:
            value = held.setdefault(key, value)
            held.move_to_end(key)
            while len(held) > limit:
                held.popitem(last=False)
        return value

    def rebuilding(self) -> bool:
        """Inside `sample_at`: reads are a resumed row's (pinned), not the stream's."""
        return bool(getattr(self.thread_state(), "rebuilding", False))

    def thread_state(self) -> threading.local:
        """What this thread is doing with the family (a rebuild, a row's fetched media): a
        resume rebuilds buffered rows on several threads at once (`packing/rebuild.py`)."""
        return self._here().setdefault("thread", threading.local())

    def io_lock(self) -> threading.Lock:
        """A lock for a reader the family shares with the read-ahead's threads."""
        return self._here().setdefault("io_lock", threading.Lock())

    def active(self) -> ReadAhead | None:
        return self._here().get("read_ahead")

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, budget_bytes: int) -> ReadAhead | None:
        """This process's read-ahead (made now if need be); None when `budget_bytes` is 0."""
        if budget_bytes <= 0:
            return None
        ahead = self.active()
        if ahead is None or ahead.closed or ahead.budget != budget_bytes:
            self.stop()
            self.io_lock()  # made here, before any read-ahead thread can race to make it
            ahead = ReadAhead(budget_bytes)
            files = self._files()
            ahead.on_close(lambda: parquet_ahead.close_all(files))
            self._here()["read_ahead"] = ahead
        return ahead

    def stop(self) -> None:
        """Stop this process's read-ahead (its threads end; its stats stay readable)."""
        ahead = self.active()
        if ahead is not None:
            ahead.close()

    def follow(self, budget_bytes: int, source: ReadSource | None, phases: Iterable[Phase]) -> Callable[[], None]:
        """Read ahead of a stream about to walk `phases`; returns what stops it when that
        stream ends. A newer stream of the same family (a second `iter()`) takes the
        read-ahead over: the older one's end leaves it running."""
        ahead = self.start(budget_bytes)
        if ahead is None:
            return lambda: None
        ahead_files = lambda: max(FILES_AHEAD, ahead.depth.threads())  # noqa: E731
        plan = source_tasks(source, phases, self._files(), ahead_files) if source is not None else iter(())
        ahead.follow(plan)

        def stop() -> None:
            if ahead.following is plan:
                ahead.close()  # kept: `stats` still reports what it did

        return stop

    def prefetch(self, budget_bytes: int, source: ReadSource | None, row_keys: Sequence[tuple]) -> None:
        """Resume: fetch the rows at `row_keys` at once, grouped by file, so that rebuilding
        them waits for one round of reads."""
        ahead = self.start(budget_bytes)
        if ahead is not None and source is not None and row_keys:
            source.pin(ahead, list(row_keys), self._files())

    def stats(self) -> dict | None:
        ahead = self.active()
        return None if ahead is None else ahead.stats()

    def _files(self) -> weakref.WeakSet:
        return self._here().setdefault("files", weakref.WeakSet())

    def _here(self) -> dict:
        """This process's read-ahead, lock and open files. A fork copies the parent's as
        they were: threads gone, a lock possibly held, files sharing their position with
        the parent. A child makes its own and keeps the copies without ever touching them:
        freeing one would close a file, and closing takes a lock that may be held."""
        held = self._per_process
        if held is None or held[0] != os.getpid():
            if held is not None:
                self._forked_away.append(held)
            held = self._per_process = (os.getpid(), {})
        return held[1]

    def __getstate__(self) -> dict:
        # Threads, locks and open files stay in the process that made them.
        return {"_per_process": None, "_forked_away": []}
