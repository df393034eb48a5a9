"""How many of a read-ahead's fetches to keep in flight (the round trip over the stream's
work), the pool of threads that runs them, no more at once than that, and the bytes a
fetched value holds (`nbytes_of`, what the read-ahead's budget counts).

A stream that works `w` seconds on each fetched task, fed by fetches that take `r` seconds
each (round trips and transfer), waits on none only if about `r / w` fetches are in flight
(Little's law: the bandwidth-delay product, counted in tasks). `Depth` measures both as the
stream runs, a moving average each: `r` in the read-ahead's threads, `w` between one take
returning and the next being asked for (time spent waiting on a take is not work). Its
`threads` is that product, never below the read-ahead's `THREADS` (what it ran before any
measurement, so a local disk's first batch reads as before) nor above `ceiling`; the bytes
in flight stay within the read-ahead's budget, which admits the tasks.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from . import fork_gate

# Enough threads to keep several round trips in flight per worker (each waits on the
# network, not the CPU); few enough that 8 workers x 8 ranks stay a few hundred threads.
THREADS = 8
# The most fetches in flight when the measured round trip asks for more: a pool's threads
# start only when that many are wanted, so a local disk keeps few.
MAX_THREADS = 32
POOL_NAME = "bagel-read-ahead"  # its threads' name prefix (seen in a stack dump, py-spy)
# The weight of the newest measurement in each moving average.
SMOOTHING = 0.2
# Work shorter than this per task counts as this: a stream taking cached results in a burst
# would otherwise ask for a thread per task.
MIN_WORK_S = 1e-3


class Depth:
    """The measured round trip of a fetch and the stream's work per take; see the module docs."""

    def __init__(self, floor: int, ceiling: int):
        self.floor, self.ceiling = int(floor), max(int(ceiling), int(floor))
        self.fetch_s: float | None = None  # a fetch's seconds, averaged
        self.work_s: float | None = None  # the stream's seconds between takes, averaged
        self._returned: float | None = None  # when the last take handed back its value
        self._lock = threading.Lock()

    def fetched(self, seconds: float) -> None:
        """A fetch took `seconds` (called from the read-ahead's threads)."""
        with self._lock:
            self.fetch_s = _average(self.fetch_s, seconds)

    def asking(self) -> None:
        """The stream asks for its next task: the time since the last one came back was work."""
        if self._returned is not None:
            work = time.perf_counter() - self._returned
            with self._lock:
                self.work_s = _average(self.work_s, work)

    def returned(self) -> None:
        """The stream has its task's value and goes to work on it."""
        self._returned = time.perf_counter()

    def threads(self) -> int:
        """Fetches to keep in flight: round trip over work, within [floor, ceiling]."""
        with self._lock:
            fetch, work = self.fetch_s, self.work_s
        if fetch is None or work is None:
            return self.floor
        wanted = math.ceil(fetch / max(work, MIN_WORK_S)) + 1
        return min(max(wanted, self.floor), self.ceiling)


def _average(old: float | None, new: float) -> float:
    return new if old is None else old + SMOOTHING * (new - old)


class DepthPool:
    """Runs fetches in the order they are started, at most `depth.threads()` at once, on a
    pool of up to `ceiling` threads (each started only when that many are wanted). Threads
    start on the first fetch: nothing at construction."""

    def __init__(self, floor: int, ceiling: int, name: str):
        self.depth = Depth(floor, ceiling)
        self.name = name
        self._lock = threading.Lock()
        self._waiting: collections.deque[tuple[Future, Callable[[], Any]]] = collections.deque()
        self._running = 0
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def start(self, fetch: Callable[[], Any]) -> Future:
        """`fetch()`'s future: it runs when a thread is free and the depth allows; a future
        cancelled before then never runs."""
        future: Future = Future()
        with self._lock:
            if self._closed:
                future.cancel()
                return future
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.depth.ceiling, thread_name_prefix=self.name)
            self._waiting.append((future, fetch))
            self._dispatch()
        return future

    def _dispatch(self) -> None:
        while self._waiting and self._pool is not None and self._running < self.depth.threads():
            future, fetch = self._waiting.popleft()
            if future.set_running_or_notify_cancel():  # False: dropped before it started
                self._running += 1
                self._pool.submit(self._run, future, fetch)

    def _run(self, future: Future, fetch: Callable[[], Any]) -> None:
        """One fetch on a pool thread, timed for the depth; its value or error to its future."""
        start = time.perf_counter()
        value: Any = None
        error: BaseException | None = None
        try:
            with fork_gate.fetching():  # a fork waits for this fetch's requests (see fork_gate)
                value = fetch()
        except BaseException as exc:  # handed to the take, which re-raises it where inline would
            error = exc
        self.depth.fetched(time.perf_counter() - start)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
        with self._lock:
            self._running -= 1
            self._dispatch()

    def close(self) -> None:
        """Cancel the fetches not started and wait for those running (unless called from one
        of this pool's threads, which cannot wait for itself)."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, collections.deque()
            pool, self._pool = self._pool, None
        for future, _ in waiting:
            future.cancel()
        if pool is not None:
            pool.shutdown(wait=not threading.current_thread().name.startswith(self.name))


def nbytes_of(value: Any) -> int:
    """The bytes a fetched value holds: Arrow tables and numpy arrays say so; bytes by length."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    size = getattr(value, "nbytes", None)
    if isinstance(size, int):
        return size
    if isinstance(value, (tuple, list)):
        return sum(nbytes_of(item) for item in value)
    if isinstance(value, dict):
        return sum(nbytes_of(item) for item in value.values())
    return 0
