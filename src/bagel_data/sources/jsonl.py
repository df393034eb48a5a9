"""A compact index of JSONL lines: where each line lives, not what it says.

The reference keeps every line's text in every worker, so a multi-GB SFT file becomes tens
of GB per node. Here each kept line costs 16 bytes (byte offset, line number, file id) in
numpy arrays, and a worker reads the lines it reaches with one seek each.

The arrays are built in bounded memory (an external sort, `jsonl_sort.py`) and, by default,
once per node into files that every process maps (`jsonl_cache.py`).
"""

from __future__ import annotations

import ctypes
import os
import random
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import numpy as np

from ..instruments import seam
from . import jsonl_cache, jsonl_sort, storage

# Bytes read at a time; finding a block's line starts takes a bool array this size. Small
# enough to stay well under the index's own size from about a million lines on.
_BLOCK = 1 << 20
# The least memory a sort run may hold before it is spilled: below it, files are few.
_RUN_FLOOR = 4 << 20


def _canonical(line: bytes) -> bytes:
    # The reference reads in text mode (universal newlines): "\r\n" and a lone "\r" both
    # end a line and read as "\n".
    if line.endswith(b"\r\n"):
        return line[:-2] + b"\n"
    if line.endswith(b"\r"):
        return line[:-1] + b"\n"
    return line


def _read_line_at(handle, offset: int, chunk: int = 1 << 16) -> bytes:
    """The line starting at `offset`, ended like `bytes.splitlines` ends it.

    Linear in the line's length: each block is searched once (a long line's blocks are
    kept in a list, not re-concatenated and searched from the start on every read).
    """
    handle.seek(offset)
    parts: list[bytes] = []
    after_cr = False  # the previous block ended with a CR: this block may hold its LF
    while True:
        block = handle.read(chunk)
        if after_cr or not block:
            if block[:1] == b"\n" and after_cr:
                parts.append(b"\n")
            return b"".join(parts)
        cut = min((i for i in (block.find(b"\n"), block.find(b"\r")) if i >= 0), default=-1)
        if cut < 0:
            parts.append(block)
            chunk = min(chunk * 2, _BLOCK)  # fewer reads for a very long line
            continue
        if block[cut : cut + 1] == b"\r" and cut + 1 == len(block):
            parts.append(block)
            after_cr = True
            continue
        end = cut + 2 if block[cut : cut + 2] == b"\r\n" else cut + 1
        parts.append(block[:end])
        return b"".join(parts)


def _line_starts(block: bytes) -> np.ndarray:
    """Where the lines of non-empty `block.splitlines(keepends=True)` start, with no Python
    object per line. A block holds whole lines, so a CR at its end is a lone terminator."""
    buf = np.frombuffer(block, dtype=np.uint8)
    returns = np.flatnonzero(buf == 13)
    # A CR just before an LF is not a terminator of its own: the LF ends that CRLF line.
    returns = returns[buf[np.minimum(returns + 1, len(buf) - 1)] != 10]
    ends = np.sort(np.concatenate([np.flatnonzero(buf == 10), returns])) + 1
    return np.concatenate([[0], ends[ends < len(buf)]]).astype(np.int64)


def _blocks(path: str, limit: int | None) -> Iterator[tuple[bytes, np.ndarray]]:
    """The file as (block, its line starts), cut at line ends so that each line lies in one
    block; reads only as far as `limit` lines, if given. One block is held at a time."""
    pending, lines = [], 0
    with storage.open_input(path) as handle:
        while limit is None or lines < limit:
            chunk = handle.read(_BLOCK)
            # The end of the last whole line; a final CR may be the first half of a CRLF.
            cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r", 0, len(chunk) - 1)) + 1
            if chunk and not cut:
                pending.append(chunk)  # a line longer than a block: wait for its end
                continue
            block = b"".join([*pending, memoryview(chunk)[:cut]])  # one copy, not two
            pending = [chunk[cut:]]
            if block:
                starts = _line_starts(block)
                lines += len(starts)
                yield block, starts
            if not chunk:
                break


def _prefix_count(count, shuffle: bool) -> int | None:
    """`count` when the lines kept are the file's first `count` (or fewer), else None."""
    return int(count) if not shuffle and isinstance(count, (int, np.integer)) and count >= 0 else None


def _kept_positions(path: str, count, shuffle: bool, seed: int) -> tuple[int | None, np.ndarray | None]:
    """(lines to read, each line's position in the kept order, or None for "its line number")
    in the reference's rule: a seeded shuffle of the line numbers, then `[:count]`."""
    prefix = _prefix_count(count, shuffle)
    if prefix is not None:
        return prefix, None  # the first `count` lines: read no further
    num_lines = sum(len(starts) for _, starts in _blocks(path, None))  # one pass to count them
    kept = range(num_lines)[:count]
    if not shuffle:
        return len(kept), None
    order = np.arange(num_lines, dtype=np.int32 if num_lines < 2**31 else np.int64)
    # random.shuffle only swaps items by index: on a memoryview it permutes the array
    # exactly as it would a list, with no Python int per line.
    # numpy's stubs do not declare ndarray a buffer, nor memoryview a mutable sequence.
    random.Random(seed).shuffle(memoryview(order))  # type: ignore[arg-type]
    position = np.full(num_lines, -1, dtype=order.dtype)  # -1: not kept
    for first in range(kept.start, kept.stop, 1 << 20):  # in slices: no full-size temporary
        stop = min(first + (1 << 20), kept.stop)
        position[order[first:stop]] = np.arange(first, stop, dtype=order.dtype)
    return None, position


def _file_records(path: str, file_id: int, rank: int, count, shuffle: bool, seed: int, seq_base: int):
    """Per block: (canonical texts, records, bytes read) of the kept lines of one file, in file order."""
    limit, position = _kept_positions(path, count, shuffle, seed)
    first_line = base = 0
    for block, starts in _blocks(path, limit):
        numbers = np.arange(first_line, first_line + len(starts), dtype=np.int64)
        local = np.flatnonzero(position[numbers] >= 0 if position is not None else numbers < int(limit or 0))
        ends = np.append(starts[1:], len(block))[local]
        keys = [block[b:e] for b, e in zip(starts[local].tolist(), ends.tolist())]
        buf = np.frombuffer(block, np.uint8)
        # A CR is only ever a line's last byte or the one before its LF.
        crs = (buf[ends - 1] == 13) | (buf[np.maximum(ends - 2, starts[local])] == 13)
        for i in np.flatnonzero(crs).tolist():
            keys[i] = _canonical(keys[i])  # CRLF and CR lines read as LF lines
        meta = np.zeros(len(local), dtype=jsonl_sort.META)
        meta["seq"] = seq_base + (numbers[local] if position is None else position[numbers[local]])
        meta["offset"], meta["line"] = base + starts[local], numbers[local]
        meta["file"], meta["rank"] = file_id, rank
        if len(local) and local[-1] == len(starts) - 1 and block[-1:] not in (b"\n", b"\r"):
            meta["bare"][-1] = 1  # the file's last line, with no terminator
        first_line, base = first_line + len(starts), base + len(block)
        yield keys, meta, len(block)


def _size(path: str) -> int:
    filesystem, inner = storage.resolve(path)
    return int(filesystem.get_file_info(inner).size or 0)


def build_arrays(files: list[tuple[str, str, Any]], shuffle: bool, seed: int, work: str | None, allocate) -> tuple:
    """(offsets, line numbers, file ids) of the kept lines of `files` ((path, folder, count)
    each) in canonical order, in arrays from `allocate(n)`; runs spill under `work`."""
    ranks = {folder: number for number, folder in enumerate(sorted({folder for _, folder, _ in files}))}
    sorter = jsonl_sort.RunSorter(work, _RUN_FLOOR, release_free_heap)
    total_bytes, scanned_bytes, seq_base = sum(_size(path) for path, _, _ in files), 0, 0
    prefixes = [_prefix_count(count, shuffle) for _, _, count in files]
    max_lines = None if None in prefixes else sum(prefixes)  # type: ignore[arg-type]
    for file_id, (path, folder, count) in enumerate(files):
        kept = 0
        for keys, meta, size in _file_records(path, file_id, ranks[folder], count, shuffle, seed, seq_base):
            scanned_bytes, kept = scanned_bytes + size, kept + len(keys)
            # A run may hold a quarter of the finished index's 16 bytes per line (at least
            # _RUN_FLOOR): the index's expected lines from the kept lines per byte so far.
            expected = total_bytes * (seq_base + kept) // max(scanned_bytes, 1)
            if max_lines is not None:
                expected = min(expected, max_lines)
            sorter.budget = max(_RUN_FLOOR, 4 * expected)
            sorter.add(keys, meta)
        seq_base += kept
    keys = meta = None  # the last block's lines: not to pin heap pages while the output fills
    sorter.close()
    out = allocate(sorter.count)
    written = 0

    def sink(records: np.ndarray) -> None:
        nonlocal written
        for array, name in zip(out, ("offset", "line", "file")):
            array[written : written + len(records)] = records[name]
        written += len(records)

    sorter.finish(sink)
    return out


def _libc_malloc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None  # not Linux with glibc: nothing to trim


_MALLOC_TRIM = _libc_malloc_trim()  # once: each CDLL() makes a class that can pin pymalloc arenas


def release_free_heap() -> None:
    # glibc keeps freed heap resident (here and in every forked DataLoader worker) until trimmed.
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class JsonlIndex(Sequence):
    """The lines used from a list of JSONL files, in canonical (sorted) order.

    `self[i]` is `(line text, image folder)`, the reference's `data_paths` entry.
    """

    def __init__(
        self,
        jsonl_paths: Sequence[str],
        image_dirs: Sequence[str],
        num_used: Sequence[int],
        shuffle_lines: bool = False,
        shuffle_seed: int = 0,
        shown_paths: Sequence[str | None] | None = None,
    ):
        self.paths = list(jsonl_paths)
        # Per file, the JSON array it is the JSONL copy of (`json_arrays.py`), or None.
        self.shown_paths = list(shown_paths or [None] * len(self.paths))
        self.image_dirs = list(image_dirs)
        files = list(zip(self.paths, self.image_dirs, num_used))
        # What chooses the kept lines and their order, beside the files themselves.
        settings = [
            [folder for _, folder, _ in files],
            [repr(c) for _, _, c in files],
            bool(shuffle_lines),
            shuffle_seed,
        ]

        def build(work: str | None, allocate) -> tuple:
            return build_arrays(files, shuffle_lines, shuffle_seed, work, allocate)

        # The folder of the mapped arrays (pickles carry it, not the arrays), or None.
        self._mapped: str | None
        arrays, self._mapped = jsonl_cache.index_arrays([path for path, _, _ in files], settings, build)
        self.offsets, self.line_numbers, self.file_ids = arrays
        release_free_heap()
        self._handles: dict[int, BinaryIO] = {}
        self._handles_pid = os.getpid()

    def __len__(self) -> int:
        return len(self.offsets)

    def _own_handles(self) -> dict[int, BinaryIO]:
        """This process's open files. A fork copies the parent's with their position (shared
        with the parent, which may still be reading) and their lock (possibly held by a
        parent's thread at the fork): a child opens its own and never touches those, not
        even to close them (closing takes the lock)."""
        if self._handles_pid != os.getpid():
            self._inherited_handles = [*getattr(self, "_inherited_handles", ()), *self._handles.values()]
            self._handles, self._handles_pid = {}, os.getpid()
        return self._handles

    @seam("read")
    def read_line(self, index: int) -> bytes:
        file_id = int(self.file_ids[index])
        handles = self._own_handles()
        handle = handles.get(file_id)
        if handle is None:
            handle = handles[file_id] = storage.open_input(self.paths[file_id])
        return _read_line_at(handle, int(self.offsets[index]))

    def location(self, index: int) -> str:
        file_id, line = int(self.file_ids[index]), int(self.line_numbers[index])
        shown = self.shown_paths[file_id] if file_id < len(getattr(self, "shown_paths", ())) else None
        if shown is not None:
            return f"{shown}, element {line}"
        return f"{self.paths[file_id]}, line {line + 1}"

    def image_dir(self, index: int) -> str:
        return self.image_dirs[int(self.file_ids[index])]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return _canonical(self.read_line(index)).decode("utf-8"), self.image_dir(index)

    def close(self) -> None:
        """Close the file handles `read_line` opened (they reopen on the next read)."""
        handles, self._handles = self._own_handles(), {}
        for handle in handles.values():
            handle.close()

    def __del__(self) -> None:
        if getattr(self, "_handles", None):
            self.close()

    def __getstate__(self) -> dict:
        # Open handles do not cross process boundaries; each worker opens its own. A mapped
        # index travels as its folder: a spawned worker maps the node's copy again.
        state = self.__dict__.copy()
        state["_handles"], state["_handles_pid"] = {}, None
        state.pop("_inherited_handles", None)
        if state.get("_mapped"):
            for name, _ in jsonl_cache.ARRAYS:
                del state[name]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        folder = state.get("_mapped")
        if folder:
            self.offsets, self.line_numbers, self.file_ids = jsonl_cache.open_arrays(folder)
