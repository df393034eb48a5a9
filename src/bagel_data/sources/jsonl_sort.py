"""The JSONL index's canonical order in bounded memory: an external merge sort.

The reference sorts every kept line as `(line text, image folder)`. Holding every line's
bytes to sort them costs more than the file itself (tens of GB per rank for a big SFT file).
Here the lines arrive in blocks; they are gathered into runs of bounded size, each run is
sorted in memory and spilled to a work folder, and the runs are merged in batches. Memory
is one run, or one small buffer per merged run, whatever the file size; the order is exact,
as every comparison is between the lines' full bytes.

A line's sort key is `(canonical text, folder rank, seq)`, `seq` being its position in the
concatenation of the files' kept lines: unique, so equal texts from equal folders keep that
order, as the reference's stable sort of tuples does. It is encoded as one `bytes` value,
`text + rank + seq` (both big-endian), followed by the record (offset, line, file) that is
never compared (`seq` is unique): bytes compare in C, with no tuple per line. The encoding
orders like the key because a canonical text ends with its only "\\n" — no text is a proper
prefix of another — except a file's last line without a terminator ("bare", at most one a
file), which is kept aside as a `_Bare` value comparing by the key itself.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

# One record per kept line, as the caller gives it.
META = np.dtype([("seq", "<i8"), ("offset", "<i8"), ("line", "<i4"), ("file", "<i4"), ("rank", "<i4"), ("bare", "u1")])
_SUFFIX = np.dtype([("rank", ">u4"), ("seq", ">u8"), ("offset", "<i8"), ("line", "<i4"), ("file", "<i4")])
RECORD = np.dtype([("offset", "<i8"), ("line", "<i4"), ("file", "<i4")])
_PER_LINE = 160  # Python bytes per held line beside its text: the value object, list slots, suffix
_FAN_IN = 64  # runs merged at once: a heap of 64 and 64 small read buffers
_READ_CHUNK = 64  # values read from a run at a time
_OUT_CHUNK = 4096  # values written or handed on at a time (in-memory path)
_READ_BUFFER = 8 << 10  # bytes buffered per run being merged

Sink = Callable[[np.ndarray], None]


class _Bare(bytes):
    """A file's last line without a terminator: `text + suffix` like the others, but ordered
    by the decoded key, since the text may be a prefix of another line's."""

    def key(self) -> tuple:
        return _decode(self)

    def __lt__(self, other):
        return self.key() < _decode(other)

    def __gt__(self, other):
        return self.key() > _decode(other)


def _decode(value: bytes) -> tuple:
    suffix = np.frombuffer(value[-_SUFFIX.itemsize :], dtype=_SUFFIX)[0]
    return bytes(value[: -_SUFFIX.itemsize]), int(suffix["rank"]), int(suffix["seq"])


def _encode(keys: list, meta: np.ndarray) -> list:
    suffix = np.empty(len(meta), dtype=_SUFFIX)
    for name in _SUFFIX.names or ():
        suffix[name] = meta[name]
    raw, width = suffix.tobytes(), _SUFFIX.itemsize
    return [key + raw[i : i + width] for key, i in zip(keys, range(0, len(raw), width))]


def records(values: list) -> np.ndarray:
    """The (offset, line, file) records that end the encoded `values`."""
    tail = -RECORD.itemsize
    return np.frombuffer(b"".join([value[tail:] for value in values]), dtype=RECORD)


@dataclass
class _Run:
    data: str  # the values, back to back
    lengths: str  # their lengths, int32


def _stream(run: _Run) -> Iterator[list]:
    """A run's values in its sorted order, a chunk at a time."""
    with open(run.data, "rb", buffering=_READ_BUFFER) as data, open(run.lengths, "rb") as lengths:
        while True:
            sizes = np.fromfile(lengths, dtype="<i4", count=_READ_CHUNK)
            if not len(sizes):
                return
            ends = np.cumsum(sizes)
            buf = data.read(int(ends[-1]))
            yield list(map(buf.__getitem__, map(slice, (ends - sizes).tolist(), ends.tolist())))


def _merge(sources: list[Iterator[list]]) -> Iterator[list]:
    """The values of sorted `sources` (each yielding sorted chunks) as sorted chunks.

    A merge in batches rather than a value at a time through a Python heap: every buffered
    value not above the smallest of the buffers' last values can go out now (no unread value
    is smaller), and `list.sort` merges those sorted pieces in C.
    """
    buffers: list[list[Any]] = [[chunk, source] for source in sources for chunk in [next(source, [])] if chunk]
    while buffers:
        bound = min(chunk[-1] for chunk, _ in buffers)
        out: list = []
        for entry in buffers:
            cut = bisect.bisect_right(entry[0], bound)
            out += entry[0][:cut]
            entry[0] = entry[0][cut:]
        out.sort()
        yield out
        for entry in buffers:
            while not entry[0]:  # the buffer that set the bound is empty: read on
                entry[0] = next(entry[1], None)
                if entry[0] is None:
                    break
        buffers = [entry for entry in buffers if entry[0]]


def _chunks(values: list) -> Iterator[list]:
    for start in range(0, len(values), _OUT_CHUNK):
        yield values[start : start + _OUT_CHUNK]


class RunSorter:
    """Gathers (texts, records) blocks; `finish` hands every record, in sorted order, to a sink.

    `budget`: bytes of memory one run may hold (texts plus `_PER_LINE` per line); the caller
    may raise it while adding (`jsonl.build_arrays` sizes it from the expected index size).
    `release`: gives freed heap back to the system (`jsonl.release_free_heap`). `folder`
    None: nothing is spilled (where no folder can be written; `jsonl_cache.in_memory`).
    """

    def __init__(self, folder: str | None, budget: int, release: Callable[[], None] = lambda: None):
        self.folder, self.budget, self.release = folder, budget, release
        self.runs: list[_Run] = []
        self.count = 0
        self._values: list = []
        self._bare: list = []
        self._held = 0
        self._numbered = 0  # run files written, to name the next

    def add(self, keys: list, meta: np.ndarray) -> None:
        self.count += len(keys)
        bare = np.flatnonzero(meta["bare"]).tolist()
        if bare:
            self._bare += [_Bare(value) for value in _encode([keys[i] for i in bare], meta[bare])]
            keep = np.ones(len(keys), dtype=bool)
            keep[bare] = False
            keys, meta = [key for key, kept in zip(keys, keep.tolist()) if kept], meta[keep]
        self._values += _encode(keys, meta)
        self._held += sum(map(len, keys)) + _PER_LINE * len(keys)
        if self._held >= self.budget and self.folder is not None:  # None: no folder to spill to
            self._spill()

    def _spill(self) -> None:
        values, self._values, self._held = self._values, [], 0
        if values:
            values.sort()
            self.runs.append(self._write_run(_chunks(values)))

    def _write_run(self, chunks: Iterable[list]) -> _Run:
        assert self.folder is not None  # only spilled where there is a folder
        os.makedirs(self.folder, exist_ok=True)
        number, self._numbered = self._numbered, self._numbered + 1
        run = _Run(os.path.join(self.folder, f"{number}.data"), os.path.join(self.folder, f"{number}.len"))
        with open(run.data, "wb") as data, open(run.lengths, "wb") as lengths:
            for values in chunks:
                data.writelines(values)
                np.fromiter(map(len, values), dtype="<i4", count=len(values)).tofile(lengths)
        return run

    def close(self) -> None:
        """The last lines added spilled too, if any run was (before the output is allocated)."""
        if self.runs:
            self._spill()
        self.release()  # the runs' values are on disk: give their pages back before merging

    def finish(self, sink: Sink) -> None:
        """Every record added, in `(text, rank, seq)` order, to `sink(records)` in chunks."""
        self.close()
        bare = sorted(self._bare)  # compared by their decoded keys
        if not self.runs:  # everything fitted in one run: no file is written
            values, self._values = self._values + bare, []
            values.sort()
            for chunk in _chunks(values):
                sink(records(chunk))
            return
        runs = self.runs
        while len(runs) > _FAN_IN:  # too many to merge at once: merge groups into longer runs
            runs = [self._merged_run(runs[i : i + _FAN_IN]) for i in range(0, len(runs), _FAN_IN)]
        for chunk in _merge([*(_stream(run) for run in runs), iter([bare])]):
            sink(records(chunk))
        _remove(runs)

    def _merged_run(self, runs: list[_Run]) -> _Run:
        if len(runs) == 1:
            return runs[0]
        merged = self._write_run(_merge([_stream(run) for run in runs]))
        _remove(runs)
        return merged


def _remove(runs: list[_Run]) -> None:
    for run in runs:
        os.remove(run.data)
        os.remove(run.lengths)
