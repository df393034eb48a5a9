"""The member index of a WebDataset tar, read in place: built once per node, mapped by all.

Listing a tar means walking its headers, which lie between its members: a pass over the
whole file. The first process of a node to open a tar lists it (`tar_members.list_tar`, the
rules `prepare t2i` uses) into the node's index cache (`jsonl_cache`: the same folder, key,
lock, checks and in-memory fallback as the JSONL index); every other rank and worker maps it.

Per sample the index keeps where its image, `.txt`, `.json` and `.cls` lie, its key, and for a key
the rules refuse, the reason and the particulars (a damaged stretch of the tar is such an entry too). Samples
are read in *blocks*: the samples whose first byte falls in one `BLOCK_BYTES` stretch of the
tar. A block reads only the members its samples use: their byte ranges, those less than
`GAP_BYTES` apart merged into one ranged read (one round trip on an object store for a few
dozen samples), so that a 300 MB `.mp4` between a sample's `.jpg` and `.txt` is never
fetched. A sample's address within its tar is `(block, sample within the block)`; the
blocks are a function of the index and `BLOCK_BYTES`, so the same on every process and run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
import weakref
from collections.abc import Iterator, Sequence

import numpy as np

from ..errors import RowDropped, SkipReason
from ..instruments import seam
from . import jsonl_cache, storage
from .tar_counts import check_count, counted_step
from .tar_members import list_tar

BLOCK_BYTES = 4 << 20
# Members of a block less than this far apart are fetched in one read: below about a round
# trip's worth of bytes, reading the gap costs less than another request.
GAP_BYTES = 1 << 20
# A sample's `problem` code: 0 for a usable sample, else the rule that refused its key.
PROBLEMS = (
    None,
    SkipReason.MEMBER_TWICE,
    SkipReason.CAPTION_WITHOUT_IMAGE,
    SkipReason.IMAGE_MISSING,
    SkipReason.TAR_DAMAGED,
    SkipReason.TAR_MEMBER_TOO_LARGE,
)
# The listing rules' version, part of the cache key: an index listed by older rules (which
# stopped at the first damaged header) is never mapped.
RULES = 2
PARTS = ("image", "txt", "json", "cls")
SAMPLE = np.dtype(
    [("problem", np.int8)]
    + [(f"{part}_{field}", np.int64) for part in PARTS for field in ("at", "size")]
    + [("text_at", np.int64), ("key_len", np.int32), ("text_len", np.int32)]
)
_CHECKED = 1024  # samples of a cached index checked against the tar before it is used


def _fits(arrays: tuple, sizes: Sequence[int]) -> bool:
    """Sampled samples: a known problem code, members inside the tar, text inside the text."""
    samples, text = arrays
    if not len(samples):
        return True
    picks = np.unique(np.linspace(0, len(samples) - 1, min(len(samples), _CHECKED)).astype(np.int64))
    chosen = np.asarray(samples[picks])
    ends = [chosen[f"{part}_at"] + chosen[f"{part}_size"] for part in PARTS]
    return bool(
        chosen["problem"].min() >= 0
        and chosen["problem"].max() < len(PROBLEMS)
        and all(chosen[f"{part}_at"].min() >= -1 and end.max() <= sizes[0] for part, end in zip(PARTS, ends))
        and chosen["text_at"].min() >= 0
        and (chosen["text_at"] + chosen["text_len"]).max() <= len(text)
        and np.all(chosen["key_len"] <= chosen["text_len"])
    )


TAR = jsonl_cache.IndexKind("tar", (("samples", SAMPLE), ("text", np.uint8)), _fits)


@dataclasses.dataclass(frozen=True)
class Block:
    """Samples `[first, stop)` of a tar, whose members lie in bytes `[start, end)`, read as
    the byte ranges `reads` (`(start, end)` each, in order)."""

    first: int
    stop: int
    start: int
    end: int
    reads: tuple[tuple[int, int], ...] = ()

    @property
    def nbytes(self) -> int:
        return sum(end - start for start, end in self.reads)


# A block's bytes: `(start, data)` per range of `Block.reads`.
BlockData = tuple[tuple[int, bytes], ...]


def _build(path: str, allocate) -> tuple:
    keyed = list_tar(path)
    texts = [_text(key, sample) for key, sample in keyed]
    samples, text = allocate(len(keyed), sum(len(key) + len(detail) for key, detail in texts))
    at = 0
    for index, ((_, sample), (key, detail)) in enumerate(zip(keyed, texts)):
        row = samples[index]
        reason = sample.reason if isinstance(sample, RowDropped) else None
        row["problem"] = PROBLEMS.index(reason)
        for part in PARTS:
            member = None if isinstance(sample, RowDropped) else getattr(sample, part)
            row[f"{part}_at"], row[f"{part}_size"] = (-1, 0) if member is None else (member.offset, member.size)
        row["text_at"], row["key_len"], row["text_len"] = at, len(key), len(key) + len(detail)
        text[at : at + len(key) + len(detail)] = np.frombuffer(key + detail, np.uint8)
        at += len(key) + len(detail)
    return samples, text


def _text(key: str, sample) -> tuple[bytes, bytes]:
    """A sample's key and, for a refused one, the particulars, as the index stores them."""
    detail = sample.detail if isinstance(sample, RowDropped) else ""
    return key.encode("utf-8", "surrogateescape"), detail.encode("utf-8", "surrogateescape")


# A remote tar's cached index is keyed by its listing (size and store-set time), not by a
# content digest (a HEAD and about 18 ranged reads); safe since forked workers build their own
# store clients (`fork_gate`). False keys it by the digest, as a local tar is keyed.
LISTED_IDENTITY = True


def listed_identity(path: str, listed: tuple[int, int | None] | None = None) -> list | None:
    """What tells a remote tar unchanged for the index cache: its size and the modification
    time its store set (which no user can set back), from its folder's listing (`listed`,
    no request) or one HEAD; None for a local tar (`jsonl_cache` then adds its inode, change
    time and a sampled digest: local times can be set back) or where the store gives no time."""
    if not storage.is_remote(path) or not LISTED_IDENTITY:
        return None
    if listed is None or listed[1] is None:
        filesystem, inner = storage.resolve(path)
        info = filesystem.get_file_info(inner)
        listed = (int(info.size or 0), info.mtime_ns)
    if listed[1] is None:
        return None
    return [path, int(listed[0]), int(listed[1]), "listed"]


def mapped_arrays(path: str, listed: tuple[int, int | None] | None = None) -> tuple[tuple, str | None]:
    """Tar `path`'s index arrays (samples, text), listed once per node, and their folder."""
    identity = listed_identity(path, listed)
    build = lambda work, allocate: _build(path, allocate)  # noqa: E731
    ids = None if identity is None else [identity]
    return jsonl_cache.index_arrays([path], [BLOCK_BYTES, RULES, PARTS], build, TAR, identities=ids)


def block_counts(path: str, listed: tuple[int, int | None] | None = None) -> tuple[int, ...]:
    """The samples of each block of tar `path`, without keeping its index: the walk by rows' layout."""
    return tuple(block.stop - block.first for block in _blocks(np.asarray(mapped_arrays(path, listed)[0][0])))


class TarIndex:
    """The samples of one tar (`path`, local or a URI) and the blocks they are read in.
    `listed`: its (size, mtime_ns) as its folder's listing gave them, so that telling a
    cached index current costs no request."""

    def __init__(self, path: str, listed: tuple[int, int | None] | None = None, counted: int | None = None):
        """`counted`: its count from a counts file (blocks cut by count; another is a `CountMismatch`)."""
        self.path = path
        (self.samples, self.text), self.folder = mapped_arrays(path, listed)
        check_count(path, len(self.samples), counted)
        # Open handles of the tar not in use: a block reuses one (no open, no HEAD on a
        # store), and blocks read at once on several threads each take their own.
        self._idle: list = []
        self._handles_lock = threading.Lock()
        self.blocks = _blocks(np.asarray(self.samples), counted_step(counted, listed, BLOCK_BYTES))
        # Python's own values: a field of a numpy record costs microseconds per read.
        self._rows, self._keys = self.samples.tolist(), bytes(self.text)
        self.nbytes = 2 * (self.samples.nbytes + self.text.nbytes)  # what the read-ahead counts it at

    def __len__(self) -> int:
        return len(self.samples)

    def key(self, index: int) -> str:
        *_, at, key_len, _ = self._rows[index]
        return self._keys[at : at + key_len].decode("utf-8", "surrogateescape")

    def problem(self, index: int) -> tuple[SkipReason, str] | None:
        """Why the rules refused sample `index`'s key, and the particulars; None if usable."""
        code, *_, at, key_len, text_len = self._rows[index]
        reason = PROBLEMS[code]
        if reason is None:
            return None
        return reason, self._keys[at + key_len : at + text_len].decode("utf-8", "surrogateescape")

    @seam("read")
    def read_block(self, block: int) -> BlockData:
        """The bytes of block `block`: one ranged read per range of its `reads`."""
        pieces = []
        with self._handle() as handle:
            for start, end in self.blocks[block].reads:
                handle.seek(start)
                data = handle.read(end - start)
                if len(data) != end - start:
                    raise OSError(f"{self.path}: read {len(data)} of {end - start} bytes at {start}")
                pieces.append((start, data))
        return tuple(pieces)

    @contextlib.contextmanager
    def _handle(self) -> Iterator:
        """An open handle of the tar for one block's reads: an idle one, else opened now; put
        back for the next block unless a read through it failed (a broken connection)."""
        with self._handles_lock:
            handle = self._idle.pop() if self._idle else None
        if handle is None:
            _close_before_fork(self)
            handle = storage.open_input(self.path)
        try:
            yield handle
        except BaseException:
            handle.close()
            raise
        with self._handles_lock:
            self._idle.append(handle)

    def close(self) -> None:
        """Close the handles kept open (a later block opens one again)."""
        with self._handles_lock:
            idle, self._idle = self._idle, []
        for handle in idle:
            handle.close()

    def __del__(self) -> None:
        for handle in getattr(self, "_idle", ()):
            with contextlib.suppress(Exception):
                handle.close()

    def parts(self, index: int, block: int, data: BlockData) -> tuple[bytes | None, ...]:
        """(image, .txt, .json, .cls) bytes of sample `index`, cut from its block's `data`."""
        spans = self._rows[index][1 : 1 + 2 * len(PARTS)]
        return tuple(None if at < 0 else _cut(data, at, size) for at, size in zip(spans[::2], spans[1::2]))


# Indexes holding open handles. They are closed before this process forks (a DataLoader's
# workers): a store's client and its kept-alive connections must not be shared with a child,
# where both ends would read each other's answers.
_HOLDERS: weakref.WeakSet = weakref.WeakSet()
_fork_hook: list[bool] = []


def _close_before_fork(index: TarIndex) -> None:
    _HOLDERS.add(index)
    if not _fork_hook:  # registered on first use, not at import
        _fork_hook.append(True)
        os.register_at_fork(before=_close_all)


def _close_all() -> None:
    for index in list(_HOLDERS):
        index.close()


def _cut(data: BlockData, at: int, size: int) -> bytes:
    """Bytes `[at, at + size)` of the tar, from the piece of `data` that holds them."""
    for start, piece in data:
        if start <= at and at + size <= start + len(piece):
            return piece[at - start : at - start + size]
    raise ValueError(f"bytes {at} to {at + size} are in no range the block read")  # a bug, not bad data


def _blocks(samples: np.ndarray, step: int | None = None) -> list[Block]:
    """Consecutive samples grouped by the `BLOCK_BYTES` stretch their first member starts in
    (a refused key, which reads nothing, joins the block before it); `step` each if given."""
    if not len(samples):
        return []
    if step is not None:  # a counted tar (`tar_counts.counted_blocks`)
        return _blocks_at(samples, [*range(0, len(samples), step), len(samples)])
    present = np.stack([samples[f"{part}_at"] for part in PARTS])
    usable = samples["problem"] == 0
    first_byte = np.where(present >= 0, present, np.iinfo(np.int64).max).min(axis=0)
    first_byte = np.maximum.accumulate(np.where(usable, first_byte, 0))
    stretch = first_byte // BLOCK_BYTES
    return _blocks_at(samples, [0, *(np.flatnonzero(np.diff(stretch)) + 1).tolist(), len(samples)])


def _blocks_at(samples: np.ndarray, cuts: list[int]) -> list[Block]:
    usable = samples["problem"] == 0
    number = np.zeros(len(samples), np.int64)
    number[cuts[1:-1]] = 1
    reads = _reads(samples, np.cumsum(number), usable)
    blocks = []
    for block, (first, stop) in enumerate(itertools.pairwise(cuts)):
        ranges = reads.get(block, ())
        if ranges:
            blocks.append(Block(first, stop, ranges[0][0], ranges[-1][1], ranges))
        else:
            blocks.append(Block(first, stop, 0, 0))
    return blocks


def _reads(samples: np.ndarray, block_of: np.ndarray, usable: np.ndarray) -> dict[int, tuple]:
    """Per block, the byte ranges of its usable samples' members, those at most `GAP_BYTES`
    apart merged. Each range spans from its first member to the furthest end among its
    members, so it holds every one of them, however the index lists them."""
    starts = np.concatenate([samples[f"{part}_at"][usable] for part in PARTS])
    ends = np.concatenate([(samples[f"{part}_at"] + samples[f"{part}_size"])[usable] for part in PARTS])
    blocks = np.concatenate([block_of[usable]] * len(PARTS))
    keep = starts >= 0
    starts, ends, blocks = starts[keep], ends[keep], blocks[keep]
    order = np.lexsort((starts, blocks))
    starts, ends, blocks = starts[order], ends[order], blocks[order]
    if not len(starts):
        return {}
    new = np.ones(len(starts), bool)
    new[1:] = (blocks[1:] != blocks[:-1]) | (starts[1:] - ends[:-1] > GAP_BYTES)
    heads = np.flatnonzero(new)
    range_ends = np.maximum.reduceat(ends, heads)
    found: dict[int, list] = {}
    for head, end in zip(heads.tolist(), range_ends.tolist()):
        found.setdefault(int(blocks[head]), []).append((int(starts[head]), int(end)))
    return {block: tuple(ranges) for block, ranges in found.items()}
