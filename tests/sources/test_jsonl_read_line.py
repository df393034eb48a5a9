"""`_read_line_at` reads one line exactly as `bytes.splitlines(keepends=True)` cuts it,
whatever the read size (CR, LF and CRLF split across reads included); a line much longer
than a read is read in linear time (the reads grow; nothing is searched twice)."""

from __future__ import annotations

import io
import random

import pytest

from bagel_data.sources.jsonl import _read_line_at


class CountingReader(io.BytesIO):
    def __init__(self, data: bytes):
        super().__init__(data)
        self.reads = 0

    def read(self, size=-1):
        self.reads += 1
        return super().read(size)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_every_line_matches_splitlines(chunk):
    rng = random.Random(chunk)
    alphabet = [b"a", b"b", b"\r", b"\n", b"\r\n", b"{", b"\xc3\xa9"]
    data = b"".join(rng.choice(alphabet) for _ in range(3000))
    handle = io.BytesIO(data)
    offset = 0
    for line in data.splitlines(keepends=True):
        assert _read_line_at(handle, offset, chunk) == line, offset
        offset += len(line)


def test_a_long_line_takes_few_reads():
    line = b"x" * (3 << 20) + b"\n"
    handle = CountingReader(line + b"next\n")
    assert _read_line_at(handle, 0, 1 << 10) == line
    assert handle.reads < 20  # doubling reads: log2(3 MiB / 1 KiB) + 1, not 3072
