"""Walking a tar's headers, past damage: each file member's (name, data offset, size), and
each stretch of bytes that is neither a header nor a member's data.

Python's `tarfile` stops quietly at the first header it cannot read, so 512 bytes of
garbage over one header in the middle of a tar lost every member after it without a word.
Every tar header carries a checksum: where one does not check out, the walk goes on block
by block (512 bytes) until the next header that does, and reports the stretch it stepped
over as `Damaged(start, end)`, so that the caller counts what was lost. Zero blocks in the
middle of a tar count as damage too (a zeroed stretch over a header loses its member just
the same); only the end-of-archive zeros after the last member are not.

A tar cut short (its size not whole 512-byte blocks, a member whose data runs past the end,
no end-of-archive block after the last member) raises `tarfile.ReadError`, as before: the
whole tar is then one unreadable unit. Extended headers (pax, GNU long names) are read by
`tarfile`'s own parser, each at most `EXTENDED_LIMIT` bytes: a forged size there is damage,
not a read of gigabytes.
"""

from __future__ import annotations

import dataclasses
import tarfile
from collections.abc import Iterator
from typing import Any

BLOCK = tarfile.BLOCKSIZE
EXTENDED_LIMIT = 1 << 20  # bytes of one pax / GNU long-name header's data
_TAIL_READ = 1 << 20  # bytes read at a time when checking the end-of-archive zeros


@dataclasses.dataclass(frozen=True)
class Damaged:
    """Bytes `[start, end)` of a tar that are no header and no member's data."""

    start: int
    end: int

    def label(self) -> str:
        return f"<damaged bytes {self.start}-{self.end}>"


Entry = tuple[str, int, int] | Damaged


class _Capped:
    """The tar's file, refusing any one read over `EXTENDED_LIMIT` (only headers and their
    extended data are read while walking)."""

    def __init__(self, handle: Any):
        self._handle = handle

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > EXTENDED_LIMIT:
            raise tarfile.HeaderError(f"an extended header of {size} bytes (over {EXTENDED_LIMIT})")
        return self._handle.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._handle.seek(offset, whence)

    def tell(self) -> int:
        return self._handle.tell()


class _Reader:
    """What `tarfile.TarInfo.fromtarfile` uses of a `TarFile`: its file, text settings,
    global pax headers, and `offset` (where the member's data ends, set by the parser)."""

    def __init__(self, handle: Any):
        self.fileobj = _Capped(handle)
        self.encoding, self.errors = tarfile.ENCODING, "surrogateescape"  # tarfile.open's defaults
        self.pax_headers: dict[str, str] = {}
        self.offset = 0


def walk(handle: Any, size: int) -> Iterator[Entry]:
    """`(name, data offset, size)` of each file member of the tar in `handle` (`size` bytes),
    and a `Damaged` for each stretch stepped over, in tar order."""
    if size % BLOCK:
        raise tarfile.ReadError(f"unexpected end of data: the tar ends after {size} bytes, mid-header")
    reader = _Reader(handle)
    at = expected = 0  # the block looked at; where the next header should start
    while at + BLOCK <= size:
        handle.seek(at)
        try:
            info = tarfile.TarInfo.fromtarfile(reader)  # type: ignore[arg-type]  # what it uses of a TarFile
        except (tarfile.HeaderError, UnicodeError, ValueError, OverflowError):
            at += BLOCK  # not a header (garbage, zeros, a forged extended header): try the next block
            continue
        end = reader.offset
        if end <= at:  # a negative size (base-256 field): no header of a member
            at += BLOCK
            continue
        if end > size:
            raise tarfile.ReadError(
                f"unexpected end of data: member {info.name!r} runs to byte {end}, past the tar's {size} bytes"
            )
        if at > expected:
            yield Damaged(expected, at)
        if info.isfile():
            yield info.name, info.offset_data, info.size
        at = expected = end
    yield from _tail(handle, expected, size)


def _tail(handle: Any, expected: int, size: int) -> Iterator[Damaged]:
    """After the last member: the end-of-archive zeros, else damage (or a cut tar)."""
    if size - expected < BLOCK:
        raise tarfile.ReadError(
            f"unexpected end of data: the tar ends after {size} bytes, with no end-of-archive block"
        )
    handle.seek(expected)
    last = expected  # the end of the last non-zero byte seen
    position = expected
    while position < size:
        data = handle.read(min(_TAIL_READ, size - position))
        if not data:
            raise tarfile.ReadError(f"unexpected end of data at byte {position} of {size}")
        stripped = data.rstrip(b"\0")
        if stripped:
            last = position + len(stripped)
        position += len(data)
    if last > expected:
        yield Damaged(expected, min(size, -(-last // BLOCK) * BLOCK))
