"""Resume: the samples a checkpoint buffered, rebuilt ahead on a few threads.

A checkpoint holds its buffered samples by reference (a cursor each); before the first pack
each is rebuilt from its row, which for images means decoding and resizing them again. One
after another that costs a buffer's worth of decodes (~2 s for 50 one-megapixel images on one
core); Pillow releases the GIL while it decodes and resizes, so threads share the work.

What a thread gives is only ever a shortcut. A row rebuilt cleanly (no skip counted, no
error) is the sample the packer's own `sample_at` call would give: a row's randomness is
keyed by its address, and a family that opts in (`parallel_rebuild`) keeps a row's state in
locals. A row that fails in any way is left alone, and the packer rebuilds it in order on
its own thread, where its skip is counted and its error raised exactly as without threads.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import SkipLog, SkipReason
from ..sample import Draw
from ..sources import fork_gate

MAX_THREADS = 8


class _Tally(SkipLog):
    """A skip log that only notes a skip: a row that skips here is rebuilt again in order,
    counted and warned about there."""

    skipped = False

    def skip(self, reason: SkipReason, location: str, detail: str = "", rows: int = 1) -> None:
        self.skipped = True


def rebuild_threads() -> int:
    """Threads for a rebuild: one fewer than the CPUs this process may run on (the packer's
    own thread is the last: it packs, or rebuilds the rows no thread has started), at most
    `MAX_THREADS`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        cpus = os.cpu_count() or 1
    return min(cpus - 1, MAX_THREADS)


def rebuild_ahead(items: Sequence[Draw], datasets: Sequence[Any], threads: int) -> Callable[[], None]:
    """Start rebuilding the not yet rebuilt `items` of families that allow it, oldest first,
    on up to `threads` threads; each such item's `rebuilt` is then the `RebuildQueue` that
    `take_rebuilt` asks. Returns what stops the rebuild (for when the stream closes)."""
    waiting = [
        item for item in items if item.sample is None and item.rebuilt is None and datasets[item.group].parallel_rebuild
    ]
    if threads < 1 or len(waiting) < 2:
        return _nothing  # nothing to share: the packer's own rebuild costs the same
    queue = RebuildQueue(waiting, datasets)
    for item in waiting:
        item.rebuilt = queue
    for index in range(min(threads, len(waiting) - 1)):
        threading.Thread(target=queue.work, name=f"bagel-data-rebuild-{index}", daemon=True).start()
    return queue.stop


def take_rebuilt(item: Draw) -> dict | None:
    """The sample rebuilt ahead for `item`; None when it failed there, or when no thread had
    started it: then the caller rebuilds it, in order, with its own skip log."""
    queue, item.rebuilt = item.rebuilt, None
    return None if queue is None else queue.take(item)


class RebuildQueue:
    """Rows to rebuild, taken by the threads oldest first, since the packer takes the buffer
    oldest first. The packer's own thread, waiting for a row a thread is rebuilding, rebuilds
    the youngest row no thread has started meanwhile: a best-fit first pack, which needs
    the whole buffer, keeps every CPU busy until it is rebuilt."""

    def __init__(self, items: list[Draw], datasets: Sequence[Any]):
        self._datasets = datasets
        self._lock = threading.Lock()
        self._waiting = collections.deque(items)
        self._running: set[int] = set()  # ids of the items a thread is rebuilding now
        self._built: dict[int, dict | None] = {}
        self._ready = {id(item): threading.Event() for item in items}

    def work(self) -> None:
        while (item := self._claim(oldest=True)) is not None:
            with fork_gate.fetching():  # a fork waits for this row's store reads (see fork_gate)
                self._finish(item)

    def take(self, item: Draw) -> dict | None:
        """`item`'s sample as a thread rebuilt it (waited for, rebuilding younger rows
        meanwhile), or None: it failed there, or nobody had started it (now the caller's)."""
        while True:
            with self._lock:
                if id(item) in self._built:
                    return self._built.pop(id(item))
                if id(item) not in self._running:  # nobody started it (or the queue stopped)
                    self._waiting = collections.deque(other for other in self._waiting if other is not item)
                    return None
            other = self._claim(oldest=False)
            if other is None:
                self._ready[id(item)].wait()
            else:
                self._finish(other)

    def stop(self) -> None:
        """Rows nobody started are left; a thread ends after the row it is on."""
        with self._lock:
            self._waiting.clear()

    def _claim(self, oldest: bool) -> Draw | None:
        with self._lock:
            if not self._waiting:
                return None
            item = self._waiting.popleft() if oldest else self._waiting.pop()
            self._running.add(id(item))
            return item

    def _finish(self, item: Draw) -> None:
        sample = _clean_rebuild(self._datasets[item.group], item.cursor)
        with self._lock:
            self._built[id(item)] = sample
            self._running.discard(id(item))
        self._ready[id(item)].set()


def _nothing() -> None:
    pass


def _clean_rebuild(dataset, cursor: tuple) -> dict | None:
    tally = _Tally(dataset.dataset_name)
    try:
        sample = dataset.sample_at(cursor, log=tally, pending=True)
    except Exception:  # raised again, in order, by the packer's own rebuild
        return None
    return None if tally.skipped else sample
