"""A bounded read-ahead: a few threads fetch what this worker's stream reads next.

On an object store every read is a round trip (tens of milliseconds), and a family reads
one row group, line or image after another. `ReadAhead` runs the family's *plan* (an
iterator of `Task`s, in the order the stream will read them) on a small thread pool while
the current pack is built; the family then `take`s each result in that same order.

What stays true with it on:

* the output is the same, bit for bit: a task runs the very call the family would make
  inline, and `take` hands back its value or re-raises its exception at the point where
  the inline call would have raised, so every skip is counted where and as it was;
* memory is bounded in decoded bytes: tasks start only while the bytes held (fetched and
  not yet taken, or in flight at their estimate) stay under `budget_bytes`, and at most
  `MAX_AHEAD` wait. An estimate comes before the read (a row group's size in its footer,
  which a dictionary-encoded column understates many times over), so each kind of task
  (the first item of its key) starts one at a time until one has come back; later ones are
  counted at their estimate times the most any of their kind came back to;
* a `take` the plan did not foresee (a resume, a rebuilt row, a plan that ran out) is a
  *miss*: the fallback runs inline, as without read-ahead;
* it starts slowly: at most `RAMP_START` tasks are ahead of the stream at first, one more
  for each task the stream takes. A worker's first pack reads about what it would read
  inline, rather than every worker and group filling its budget at once and competing with
  the reads that pack waits for (a store's request rate, a node's bandwidth);
* its depth follows the store: `THREADS` fetches at once until the round trip and the
  stream's work per task are measured, then their ratio (`read_depth`, up to `MAX_THREADS`);
* a plan may start a later task early (`Early`, with up to half the window): a next file's
  footer while the plan waits on this file's, so that the read-ahead reaches across files
  as fast as across row groups; the task joins the queue when the plan yields it.

`pin` is for resume: the rows a checkpoint buffered are fetched at once, grouped by file,
and kept for exactly the number of takes that will ask for them.

Threads start on first use in the process that iterates (a DataLoader worker after its
fork) and stop in `close`; nothing starts at import.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import threading
from collections.abc import Callable, Generator, Hashable, Iterator
from concurrent.futures import Future
from typing import Any

from .read_depth import MAX_THREADS, POOL_NAME, THREADS, DepthPool, nbytes_of

# Most tasks queued ahead, whatever their size: bounds the plan's walk for tiny tasks.
MAX_AHEAD = 64
# Tasks ahead of a stream that has taken none yet; each take allows one more (to MAX_AHEAD).
RAMP_START = 2
# A plan's "not yet": its next task depends on a result still in flight (a row group
# count that comes with the footer). The plan is asked again when a task completes.
PENDING: Any = object()


@dataclasses.dataclass(eq=False)
class Task:
    """One fetch: `fetch()` is the call the family would make inline, `estimate` its size
    in bytes before it has run. `future` is set once it is submitted."""

    key: Hashable
    fetch: Callable[[], Any]
    estimate: int
    future: Future | None = None
    charged: int = 0  # bytes counted against the budget: estimate, then actual size
    unsized: bool = False  # started before any task of its kind came back
    released: bool = False

    def awaited(self) -> Generator[Any, None, Any]:
        """A plan's steps for a task it needs the result of: the task, then PENDING until it is
        done; the result, or None where the fetch failed (the family's take then raises)."""
        yield self
        while self.future is None or not self.future.done():
            yield PENDING
        return None if self.future.cancelled() or self.future.exception() is not None else self.future.result()


@dataclasses.dataclass(eq=False)
class Early:
    """A plan's hint: start `task` now if there is room; the plan yields the task itself
    later, at its place in the stream's order (a hint without room is dropped)."""

    task: Task


def _kind(task: Task) -> Hashable:  # the first item of its key (`"rg"`, `"meta"`, `"row"`), or the key
    return task.key[0] if isinstance(task.key, tuple) and task.key else task.key


class ReadAhead:
    """Fetch a plan's tasks ahead of the stream, within `budget_bytes`; see the module docs."""

    def __init__(self, budget_bytes: int, threads: int = THREADS, ramp_start: int = RAMP_START):
        self.budget = int(budget_bytes)
        self.threads = int(threads)
        self._lock = threading.RLock()
        self._queue: collections.deque[Task] = collections.deque()  # in the stream's order
        self._early: list[Task] = []  # started by a hint, not yet yielded by the plan
        self.window = max(1, ramp_start)  # the most tasks ahead now: grows with each take of the stream
        self._pinned: dict[Hashable, list] = {}  # key -> [task, extract, takes left]
        self._plan: Iterator | None = None
        self.following: Iterator | None = None  # the plan last given to `follow`, even once run out
        self._next: Task | None = None  # pulled from the plan, waiting for room
        self._planning = False
        self._pool = DepthPool(self.threads, max(self.threads, MAX_THREADS), POOL_NAME)
        self.depth = self._pool.depth
        self._on_close: list[Callable[[], None]] = []
        self.closed = False
        self.held = self.peak = self.fetched = self.hits = self.misses = 0
        self._expansion: dict[Hashable, float] = {}  # per kind: most bytes held per byte estimated
        self._unsized: collections.Counter = collections.Counter()  # per kind: in flight, size unknown

    # -- the stream's plan ---------------------------------------------------------------
    def follow(self, plan: Iterator) -> None:
        """Fetch `plan`'s tasks ahead from now on (replacing any earlier plan)."""
        with self._lock:
            self._drop_queue()
            self._plan, self._next, self.following = plan, None, plan
            self._top_up()

    def take(self, key: Hashable, fallback: Callable[[], Any], stream: bool = True) -> Any:
        """The value of the next task with `key` (re-raising its exception), `fallback()`
        when none. A `stream` take follows the plan: tasks queued before it were passed by
        the stream and are dropped. Any other take (a resumed row) is served by `pin`."""
        if stream:
            self.depth.asking()
        try:
            return self._take(key, fallback, stream)
        finally:
            if stream:
                self.depth.returned()

    def _take(self, key: Hashable, fallback: Callable[[], Any], stream: bool) -> Any:
        with self._lock:
            pinned = None if stream else self._pinned.get(key)
            task = pinned[0] if pinned else (self._pop_until(key) if stream else None)
            if stream:
                self.window = min(self.window + 1, MAX_AHEAD)
                self._top_up()
            if pinned:
                pinned[2] -= 1
                if pinned[2] <= 0:
                    del self._pinned[key]
                    self._release(pinned[0])
        if task is None or task.future is None:
            self.misses += 1
            return fallback()
        self.hits += 1
        try:
            value = task.future.result()
            return pinned[1](value) if pinned else value
        finally:
            if not pinned:
                with self._lock:
                    self._release(task)
                    self._top_up()

    def _pop_until(self, key: Hashable) -> Task | None:
        if not any(task.key == key for task in self._queue):
            return None
        while True:
            task = self._queue.popleft()
            if task.key == key:
                return task
            self._drop(task)

    def _top_up(self) -> None:
        """Submit the plan's next tasks while there is room. Re-entered from a completion
        callback that runs inside a submit: the outer call goes on, so this returns."""
        if self._planning or self.closed:
            return
        self._planning = True
        try:
            while self._plan is not None and len(self._queue) + len(self._early) < self.window:
                task = self._next if self._next is not None else self._pull()
                if task is None:
                    self._plan = None
                elif task is PENDING:
                    return
                elif isinstance(task, Early):
                    self._start_early(task.task)
                elif task.future is not None:  # started early: it takes its place in the queue
                    if task in self._early:
                        self._early.remove(task)
                    self._queue.append(task)
                elif self._queue and not self._fits(task):
                    self._next = task  # the first task always starts, so one large unit still reads
                    return
                else:
                    self._next = None
                    self._queue.append(task)
                    self._submit(task)
        finally:
            self._planning = False

    def _fits(self, task: Task) -> bool:
        return not self._waits_for_size(task) and self.held + self._charge(task) <= self.budget

    def _start_early(self, task: Task) -> None:
        # Not held back while its kind is unsized: hints are few (half the window), and a
        # footer's size is near its estimate, unlike a dictionary-encoded row group's.
        room = self.held + self._charge(task) <= self.budget
        if task.future is None and len(self._early) < max(1, self.window // 2) and room:
            self._early.append(task)
            self._submit(task)

    def _pull(self) -> Task | None:
        assert self._plan is not None
        try:
            return next(self._plan, None)
        except Exception:  # a plan that cannot go on (a family's own units): the rest reads inline
            return None

    # -- resume: rows fetched at once --------------------------------------------------
    def pin(self, task: Task, takes: dict[Hashable, tuple[Callable[[Any], Any], int]]) -> None:
        """Fetch `task` now, outside the budget (a checkpoint's buffer is bounded by
        `max_buffer_size`); each key of `takes` then answers its number of `take`s with
        `extract(value)` (which may raise the error stored for that key)."""
        with self._lock:
            if self.closed:
                return
            self._submit(task)
            for key, (extract, count) in takes.items():
                self._pinned[key] = [task, extract, count]

    # -- bookkeeping ----------------------------------------------------------------------
    def _submit(self, task: Task) -> None:
        task.charged = self._charge(task)
        task.unsized = _kind(task) not in self._expansion and task.estimate > 0
        self._unsized[_kind(task)] += task.unsized
        self.held += task.charged
        self.peak = max(self.peak, self.held)
        task.future = self._pool.start(task.fetch)
        # Added once started: a fetch done already (a quick one, run as its thread started) is
        # counted here, before this call returns, as a pool's own future would be.
        task.future.add_done_callback(lambda _: self._done(task))

    def _done(self, task: Task) -> None:
        with self._lock:
            future = task.future
            assert future is not None
            actual = 0 if future.cancelled() or future.exception() is not None else nbytes_of(future.result())
            self._learn(task, actual, future.cancelled() or future.exception() is not None)
            self.fetched += actual
            if not task.released:
                self.held += actual - task.charged
                task.charged = actual
                self.peak = max(self.peak, self.held)
            self._top_up()  # a plan waiting on this result (PENDING) can go on

    def _waits_for_size(self, task: Task) -> bool:
        """One of its kind is in flight and none has come back yet: its size is a guess."""
        return _kind(task) not in self._expansion and self._unsized[_kind(task)] > 0

    def _charge(self, task: Task) -> int:
        """The bytes `task` is counted at before it has run."""
        return math.ceil(max(int(task.estimate), 0) * self._expansion.get(_kind(task), 1.0))

    def _learn(self, task: Task, actual: int, failed: bool) -> None:
        kind = _kind(task)
        self._unsized[kind] -= task.unsized
        if not failed and task.estimate > 0:
            self._expansion[kind] = max(self._expansion.get(kind, 0.0), actual / task.estimate)

    def _release(self, task: Task) -> None:
        if not task.released:
            task.released = True
            self.held -= task.charged

    def _drop(self, task: Task) -> None:
        if task.future is not None:
            task.future.cancel()  # not started yet: never runs; running: its result is dropped
        self._release(task)

    def _drop_queue(self) -> None:
        while self._queue:
            self._drop(self._queue.popleft())
        while self._early:
            self._drop(self._early.pop())

    def on_close(self, callback: Callable[[], None]) -> None:
        self._on_close.append(callback)

    def close(self) -> None:
        """Stop fetching, wait for the reads in flight and free what they hold."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._plan = self._next = None
            self._drop_queue()
            for task, _, _ in self._pinned.values():
                self._release(task)
            self._pinned.clear()
        self._pool.close()  # outside the lock: a fetch finishing meanwhile takes it
        for callback in self._on_close:
            callback()
        self._on_close.clear()

    def stats(self) -> dict:
        """Bytes held now and at most, bytes fetched, takes served (hits) or read inline (misses)."""
        return {
            "budget_bytes": self.budget,
            "held_bytes": self.held,
            "peak_bytes": self.peak,
            "fetched_bytes": self.fetched,
            "hits": self.hits,
            "misses": self.misses,
            "threads": self.depth.threads(),
        }
