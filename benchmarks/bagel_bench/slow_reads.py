"""Local files that answer like an object store: each open and each read waits one round
trip, and a `Tally` counts them. For measuring the read-ahead (`bench/read_ahead.py`,
`bench/read_ahead_load.py`), a video read from a store (`bench/video.py`), and for tests
that need a read to fail at a chosen place (`fail`: a byte range whose reads raise OSError).

`delayed_storage` attaches to the library's `open` stage (`storage.open_input`, a seam of
`bagel_data.instruments`) for the duration of a `with` block, so every reader that opens through it (parquet, JSONL, object-store media) pays the delay; local
media read with `open()` directly do not. A round trip per read is what an object store
charges for a ranged GET, and the open stands for the HEAD that gets the size.
"""

from __future__ import annotations

import collections
import contextlib
import io
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from bagel_data.instruments import attached
from bagel_data.sources import storage


class Tally:
    """Requests a delayed store answered: `opens`, `reads` and `bytes` read. Thread-safe;
    `shared`: counted in memory that forked processes (DataLoader workers) share."""

    KINDS = ("opens", "reads", "bytes")

    def __init__(self, shared: bool = False):
        array: Any = multiprocessing.Array("q", len(self.KINDS)) if shared else None
        self._values: Any = array if shared else [0] * len(self.KINDS)
        self._lock = array.get_lock() if shared else threading.Lock()

    def add(self, kind: str, amount: int = 1) -> None:
        with self._lock:
            self._values[self.KINDS.index(kind)] += amount

    def __getitem__(self, kind: str) -> int:
        return int(self._values[self.KINDS.index(kind)])

    def counts(self) -> dict[str, int]:
        return {kind: self[kind] for kind in self.KINDS}

    def reset(self) -> dict[str, int]:
        """The counts so far, then zero."""
        with self._lock:
            counts = {kind: int(value) for kind, value in zip(self.KINDS, self._values)}
            self._values[:] = [0] * len(self.KINDS)
        return counts


class DelayedFile(io.RawIOBase):
    """A local file whose every `read` first waits `delay` seconds (counted in `tally`); a
    read that touches the byte range `fail` (start, stop) raises OSError instead."""

    def __init__(self, path: str, delay: float, fail: tuple[int, int] | None = None, tally: Tally | None = None):
        super().__init__()
        self._file = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._size = os.fstat(self._file.fileno()).st_size
        self.delay, self.fail, self.path, self.tally = delay, fail, path, tally

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def size(self) -> int:
        return self._size

    def read(self, size: int | None = -1) -> bytes:
        start = self._file.tell()
        stop = self._size if size is None or size < 0 else min(start + size, self._size)
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None and start < self.fail[1] and stop > self.fail[0]:
            raise OSError(f"injected read failure of {self.path} at bytes [{start}, {stop})")
        data = self._file.read(stop - start)
        if self.tally is not None:
            self.tally.add("reads")
            self.tally.add("bytes", len(data))
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._file.close()
        super().close()


class OpenCounter:
    """How many times each path was opened through `storage.open_input` (thread-safe)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, path: str) -> None:
        with self._lock:
            self.counts[path] += 1


@contextlib.contextmanager
def delayed_storage(
    delay: float = 0.0,
    fail: dict[str, tuple[int, int]] | None = None,
    opens: OpenCounter | None = None,
    tally: Tally | None = None,
) -> Iterator[None]:
    """Local paths open as `DelayedFile`s (an open waits `delay` too) while the block runs;
    `fail` maps a path to the byte range whose reads fail; `opens` counts the opens per
    path, `tally` the opens, reads and bytes."""
    failing = {os.path.abspath(path): span for path, span in (fail or {}).items()}

    def open_input(call, args, kwargs):
        path = args[0]
        if storage.is_uri(path):
            return call(*args, **kwargs)
        if opens is not None:
            opens.add(os.path.abspath(path))
        if tally is not None:
            tally.add("opens")
        if delay:
            time.sleep(delay)
        return DelayedFile(path, delay, failing.get(os.path.abspath(path)), tally)

    with attached({"open": open_input}):
        yield


def row_group_bytes(path: str, row_group: int) -> tuple[int, int]:
    """The byte range a row group's column chunks take in a parquet file."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path).row_group(row_group)
    starts, stops = [], []
    for index in range(meta.num_columns):
        column = meta.column(index)
        start = column.dictionary_page_offset or column.data_page_offset
        starts.append(start)
        stops.append(start + column.total_compressed_size)
    return min(starts), max(stops)
