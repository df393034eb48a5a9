"""`content_digest` and `local_identity` (sources/content_stamp.py), at their exact limits.

Checkpoints store the digest (`checkpoint/inputs.py`) and a later run recomputes it to tell
its inputs unchanged, so the digest is a format: the bytes it covers and how they are hashed
are recomputed here independently, from the documented rule (the size, then the whole file
up to `whole_limit`; above it, the first and last `ends` bytes and `blocks` blocks of
`BLOCK` bytes at `ends + span * i // max(blocks - 1, 1)`, `span = size - 2 * ends - BLOCK`).
A byte inside a covered region changes the digest and a byte just outside it does not:
the cost stays bounded and an edit where it is read is always seen.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from bagel_data.sources.content_stamp import content_digest, local_identity

ENDS = 100
# The documented 4 KiB, written out, not imported: checkpoints written by an earlier version
# hold digests over blocks of this size, and must still match.
BLOCK = 4096


def _expected(data: bytes, whole_limit: int, ends: int, blocks: int) -> str:
    size = len(data)
    digest = hashlib.sha256(str(size).encode() + b":")
    if size <= whole_limit:
        digest.update(data)
        return digest.hexdigest()[:32]
    digest.update(data[:ends])
    span = size - 2 * ends - BLOCK
    for i in range(blocks):
        start = ends + (span * i) // max(blocks - 1, 1)
        digest.update(data[start : start + BLOCK])
    digest.update(data[size - ends :])
    return digest.hexdigest()[:32]


def _covered(size: int, ends: int, blocks: int) -> list[tuple[int, int]]:
    """The [start, end) byte ranges a sampled digest reads."""
    span = size - 2 * ends - BLOCK
    starts = [ends + (span * i) // max(blocks - 1, 1) for i in range(blocks)]
    return [(0, ends), *((start, start + BLOCK) for start in starts), (size - ends, size)]


def _data(size: int) -> bytes:
    return bytes((i * 7 + i // 251) % 256 for i in range(size))


def _digest(tmp_path, data: bytes, whole_limit: int, ends: int = ENDS, blocks: int = 3) -> str:
    path = tmp_path / "input.jsonl"
    path.write_bytes(data)
    return content_digest(str(path), len(data), whole_limit=whole_limit, ends=ends, blocks=blocks)


def _flipped(data: bytes, offset: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ 0xFF]) + data[offset + 1 :]


@pytest.mark.parametrize("size", [0, 1, 5000])
def test_a_file_up_to_the_limit_is_hashed_whole(tmp_path, size):
    data = _data(size)
    assert _digest(tmp_path, data, whole_limit=size) == _expected(data, size, ENDS, 3)


def test_at_the_limit_every_byte_counts_and_one_byte_over_it_is_sampled(tmp_path):
    """`size == whole_limit` is whole (a byte between the sampled blocks is seen); one byte
    more is sampled (the same byte is not read)."""
    size = 2 * ENDS + 3 * BLOCK + 4000
    data = _data(size)
    gap = ENDS + BLOCK + 10  # after the first block, before the second
    assert all(not start <= gap < end for start, end in _covered(size, ENDS, 2))
    assert _digest(tmp_path, data, size, blocks=2) != _digest(tmp_path, _flipped(data, gap), size, blocks=2)
    over = size - 1
    assert _digest(tmp_path, data, over, blocks=2) == _expected(data, over, ENDS, 2)
    assert _digest(tmp_path, data, over, blocks=2) == _digest(tmp_path, _flipped(data, gap), over, blocks=2)


@pytest.mark.parametrize("blocks", [0, 1, 2, 3, 7])
@pytest.mark.parametrize("size", [2 * ENDS + BLOCK, 2 * ENDS + BLOCK + 1, 2 * ENDS + 5 * BLOCK + 333])
def test_a_sampled_digest_hashes_the_head_the_blocks_and_the_tail(tmp_path, size, blocks):
    data = _data(size)
    assert _digest(tmp_path, data, whole_limit=0, blocks=blocks) == _expected(data, 0, ENDS, blocks)


@pytest.mark.parametrize("blocks", [1, 3])
def test_each_sampled_region_is_seen_from_its_first_to_its_last_byte_and_no_further(tmp_path, blocks):
    size = 2 * ENDS + 4 * BLOCK + 77
    data = _data(size)
    before = _digest(tmp_path, data, whole_limit=0, blocks=blocks)
    regions = _covered(size, ENDS, blocks)
    inside = {offset for start, end in regions for offset in (start, end - 1)}
    outside = {offset for start, end in regions for offset in (start - 1, end)} - inside
    outside = {offset for offset in outside if 0 <= offset < size and not any(s <= offset < e for s, e in regions)}
    assert outside, "the regions must leave gaps"
    for offset in sorted(inside):
        assert _digest(tmp_path, _flipped(data, offset), whole_limit=0, blocks=blocks) != before, offset
    for offset in sorted(outside):
        assert _digest(tmp_path, _flipped(data, offset), whole_limit=0, blocks=blocks) == before, offset


def test_the_size_is_part_of_the_digest(tmp_path):
    """Two files whose sampled bytes agree but whose sizes differ (bytes added in a gap)."""
    data = _data(2 * ENDS + 3 * BLOCK)
    longer = data[: ENDS + BLOCK + 5] + b"x" * 9 + data[ENDS + BLOCK + 5 :]
    assert _digest(tmp_path, data, 0, blocks=1) != _digest(tmp_path, longer, 0, blocks=1)
    assert _digest(tmp_path, b"", 10) != _digest(tmp_path, b"\0", 10)


def test_an_unreadable_file_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        content_digest(str(tmp_path / "missing.jsonl"), 10, whole_limit=100, ends=4, blocks=2)


def test_local_identity_is_the_device_inode_and_change_time(tmp_path):
    path = tmp_path / "input.jsonl"
    path.write_bytes(b'{"a": 1}\n')
    stat = os.stat(path)
    assert local_identity(str(path)) == [stat.st_dev, stat.st_ino, stat.st_ctime_ns]
    replaced = tmp_path / "replacement.jsonl"
    replaced.write_bytes(b'{"a": 2}\n')
    os.utime(replaced, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the mtime put back, as `cp -p` does
    os.replace(replaced, path)
    assert local_identity(str(path)) != [stat.st_dev, stat.st_ino, stat.st_ctime_ns]


def test_local_identity_of_a_uri_is_none():
    assert local_identity("s3://bucket/data/input.jsonl") is None
