"""A compact index of JSONL lines: where each line lives, not what it says.

The reference keeps every line's text in every worker, so a multi-GB SFT file becomes tens
of GB per node. Here each kept line costs 16 bytes (byte offset, line number, file id) in
numpy arrays, and a worker reads the lines it reaches with one seek each.
"""

from __future__ import annotations

import ctypes
import random
from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np

from . import storage

# Bytes read at a time; finding a block's line starts takes a bool array this size.
_BLOCK = 8 << 20


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


def _read_blocks(path: str, limit: int | None) -> list[tuple[bytes, np.ndarray]]:
    """The file as (block, its line starts), cut at line ends so that each key comes from one
    block and each block can be freed once cut; reads only as far as `limit` lines, if given."""
    blocks, pending, lines = [], [], 0
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
                blocks.append((block, _line_starts(block)))
                lines += len(blocks[-1][1])
            if not chunk:
                break
    return blocks


def _kept_lines(count: int, num_lines: int, shuffle: bool, seed: int) -> np.ndarray:
    """Line numbers used, in the reference's order: a seeded shuffle, then the first `count`."""
    order = np.arange(num_lines, dtype=np.int64)
    if shuffle:
        # random.shuffle only swaps items by index: on a memoryview it permutes the array
        # exactly as it would a list, with no Python int per line.
        # numpy's stubs do not declare ndarray a buffer, nor memoryview a mutable sequence.
        random.Random(seed).shuffle(memoryview(order))  # type: ignore[arg-type]
    return order[:count]


def _index_file(path: str, file_id: int, count: int, shuffle: bool, seed: int) -> tuple[np.ndarray, ...]:
    """(canonical line keys, byte offsets, line numbers, file ids) of the lines used from a file."""
    prefix = not shuffle and isinstance(count, (int, np.integer)) and count >= 0
    blocks: list[Any] = _read_blocks(path, int(count) if prefix else None)  # None once a block is used
    kept = _kept_lines(count, sum(len(starts) for _, starts in blocks), shuffle, seed)
    # Slots of the kept lines in file order, to walk the blocks once; unshuffled, kept[i] == i.
    slots = np.argsort(kept) if shuffle else kept
    by_line = kept[slots] if shuffle else kept
    keys = np.empty(len(kept), dtype=object)
    offsets = np.empty(len(kept), dtype=np.int64)
    first_line = base = done = 0
    for number in range(len(blocks)):
        block, starts = blocks[number]
        blocks[number] = None  # free each block once its keys are cut
        stop = int(np.searchsorted(by_line, first_line + len(starts)))
        local = by_line[done:stop] - first_line
        ends = np.append(starts[1:], len(block))[local]
        for slot, begin, end in zip(slots[done:stop].tolist(), starts[local].tolist(), ends.tolist()):
            keys[slot] = _canonical(block[begin:end])
        offsets[slots[done:stop]] = base + starts[local]
        first_line, base, done = first_line + len(starts), base + len(block), stop
        del block, starts
        release_free_heap()  # so the keys reuse the freed block's pages
    return keys, offsets, kept.astype(np.int32), np.full(len(kept), file_id, dtype=np.int32)


def _join(parts: list[tuple]) -> tuple:
    """Per-file (keys, offsets, line numbers, file ids) as four arrays; one file is not copied."""
    if len(parts) == 1:
        return parts[0]
    dtypes = (object, np.int64, np.int32, np.int32)
    return tuple(np.concatenate([p[i] for p in parts] or [np.zeros(0, t)]) for i, t in enumerate(dtypes))


def _canonical_order(keys: np.ndarray, file_ids: np.ndarray, folders: list[str]) -> np.ndarray:
    """The order of sorted (key, file's folder) tuples, with Python objects for the keys only."""
    order = np.argsort(keys, kind="stable")
    if len(order) < 2 or len(set(folders)) < 2:
        return order
    # Equal texts from files with different folders order by folder, as tuples would: a
    # stable sort by (run of equal texts, folder rank) moves lines only within such runs.
    rank = {folder: number for number, folder in enumerate(sorted(set(folders)))}
    folder_ranks = np.asarray([rank[folder] for folder in folders], dtype=np.int32)
    ranked = keys[order]
    runs = np.concatenate([[0], np.cumsum(ranked[1:] != ranked[:-1])])
    del ranked
    return order[np.lexsort((folder_ranks[file_ids[order]], runs))]


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
    ):
        self.paths = list(jsonl_paths)
        self.image_dirs = list(image_dirs)
        used = enumerate(zip(self.paths, self.image_dirs, num_used))
        parts = [_index_file(path, i, count, shuffle_lines, shuffle_seed) for i, (path, _, count) in used]
        folders = self.image_dirs[: len(parts)]
        keys, offsets, line_numbers, file_ids = _join(parts)
        del parts
        # Sorting by (text, folder) is the reference's canonical order before the epoch
        # shuffle; UTF-8 byte order equals code-point order, so bytes sort like the text.
        order = _canonical_order(keys, file_ids, folders)
        del keys
        self.offsets, self.line_numbers, self.file_ids = offsets[order], line_numbers[order], file_ids[order]
        del order, offsets, line_numbers, file_ids
        release_free_heap()
        self._handles: dict[int, BinaryIO] = {}

    def __len__(self) -> int:
        return len(self.offsets)

    def read_line(self, index: int) -> bytes:
        file_id = int(self.file_ids[index])
        handle = self._handles.get(file_id)
        if handle is None:
            handle = self._handles[file_id] = storage.open_input(self.paths[file_id])
        return _read_line_at(handle, int(self.offsets[index]))

    def location(self, index: int) -> str:
        return f"{self.paths[int(self.file_ids[index])]}, line {int(self.line_numbers[index]) + 1}"

    def image_dir(self, index: int) -> str:
        return self.image_dirs[int(self.file_ids[index])]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return _canonical(self.read_line(index)).decode("utf-8"), self.image_dir(index)

    def close(self) -> None:
        """Close the file handles `read_line` opened (they reopen on the next read)."""
        handles, self._handles = self._handles, {}
        for handle in handles.values():
            handle.close()

    def __del__(self) -> None:
        if getattr(self, "_handles", None):
            self.close()

    def __getstate__(self) -> dict:
        # Open handles do not cross process boundaries; each worker opens its own.
        state = self.__dict__.copy()
        state["_handles"] = {}
        return state
