"""A compact index of JSONL lines: where each line lives, not what it says.

The reference keeps every line's text in every worker, so a multi-GB SFT file becomes tens
of GB per node. Here each kept line costs 16 bytes (byte offset, line number, file id) in
numpy arrays, and a worker reads the lines it reaches with one seek each.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from . import storage


def _read_lines(path: str) -> list[bytes]:
    with storage.open_input(path) as handle:
        data = handle.read()
    return data.splitlines(keepends=True)


def _canonical(line: bytes) -> bytes:
    # The reference reads in text mode (universal newlines): "\r\n" and a lone "\r" both
    # end a line and read as "\n".
    if line.endswith(b"\r\n"):
        return line[:-2] + b"\n"
    if line.endswith(b"\r"):
        return line[:-1] + b"\n"
    return line


def _read_line_at(handle, offset: int, chunk: int = 1 << 16) -> bytes:
    """The line starting at `offset`, ended like `bytes.splitlines` ends it."""
    handle.seek(offset)
    data = b""
    while True:
        block = handle.read(chunk)
        data += block
        cut = min((i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0), default=-1)
        if cut >= 0 and (data[cut : cut + 1] == b"\n" or cut + 1 < len(data) or not block):
            end = cut + 2 if data[cut : cut + 2] == b"\r\n" else cut + 1
            return data[:end]
        if not block:
            return data


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
        keys: list[tuple[bytes, str]] = []
        offsets: list[int] = []
        line_numbers: list[int] = []
        file_ids: list[int] = []
        for file_id, (path, image_dir, count) in enumerate(zip(self.paths, self.image_dirs, num_used)):
            lines = _read_lines(path)
            starts = np.concatenate([[0], np.cumsum([len(line) for line in lines])[:-1]]).astype(np.int64)
            order = list(range(len(lines)))
            if shuffle_lines:
                random.Random(shuffle_seed).shuffle(order)
            for line_no in order[:count]:
                keys.append((_canonical(lines[line_no]), image_dir))
                offsets.append(int(starts[line_no]) if lines else 0)
                line_numbers.append(line_no)
                file_ids.append(file_id)
            del lines
        # Sorting by (text, folder) is the reference's canonical order before the epoch
        # shuffle; UTF-8 byte order equals code-point order, so bytes sort like the text.
        order = sorted(range(len(keys)), key=keys.__getitem__)
        self.offsets = np.asarray(offsets, dtype=np.int64)[order]
        self.line_numbers = np.asarray(line_numbers, dtype=np.int32)[order]
        self.file_ids = np.asarray(file_ids, dtype=np.int32)[order]
        self._handles: dict[int, object] = {}

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

    def __getstate__(self) -> dict:
        # Open handles do not cross process boundaries; each worker opens its own.
        state = self.__dict__.copy()
        state["_handles"] = {}
        return state
