"""How many of a read-ahead's fetches to keep in flight: the round trip over the stream's work.

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

import math
import threading
import time

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
