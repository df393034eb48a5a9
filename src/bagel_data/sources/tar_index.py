"""The member index of a WebDataset tar, read in place: built once per node, mapped by all.

Listing a tar means walking its headers, which lie between its members: a pass over the
whole file. The first process of a node to open a tar lists it (`tar_members.list_tar`, the
rules `prepare t2i` uses) into the node's index cache (`jsonl_cache`: the same folder, key,
lock, checks and in-memory fallback as the JSONL index); every other rank and worker maps it.

Per sample the index keeps where its image, `.txt` and `.json` lie, its key, and for a key
the rules refuse, the reason and the particulars. Samples are read in *blocks*: the samples
whose first byte falls in one `BLOCK_BYTES` stretch of the tar, fetched with one ranged read
(one round trip on an object store for a few dozen samples). A sample's address within its
tar is `(block, sample within the block)`; the blocks are a function of the index and
`BLOCK_BYTES`, so the same on every process and every run.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np

from ..errors import RowDropped, SkipReason
from ..instruments import seam
from . import jsonl_cache, storage
from .tar_members import list_tar

BLOCK_BYTES = 4 << 20
# A sample's `problem` code: 0 for a usable sample, else the rule that refused its key.
PROBLEMS = (None, SkipReason.MEMBER_TWICE, SkipReason.CAPTION_WITHOUT_IMAGE, SkipReason.IMAGE_MISSING)
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
    """Samples `[first, stop)` of a tar, whose members lie in bytes `[start, end)`."""

    first: int
    stop: int
    start: int
    end: int


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


class TarIndex:
    """The samples of one tar (`path`, local or a URI) and the blocks they are read in."""

    def __init__(self, path: str):
        self.path = path
        (self.samples, self.text), self.folder = jsonl_cache.index_arrays(
            [path], [BLOCK_BYTES, PARTS], lambda work, allocate: _build(path, allocate), TAR
        )
        self.blocks = _blocks(np.asarray(self.samples))
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
    def read_block(self, block: int) -> bytes:
        """The bytes of block `block`: one ranged read."""
        span = self.blocks[block]
        with storage.open_input(self.path) as handle:
            handle.seek(span.start)
            data = handle.read(span.end - span.start)
        if len(data) != span.end - span.start:
            raise OSError(f"{self.path}: read {len(data)} of {span.end - span.start} bytes at {span.start}")
        return data

    def parts(self, index: int, block: int, data: bytes) -> tuple[bytes | None, ...]:
        """(image, .txt, .json, .cls) bytes of sample `index`, cut from its block's `data`."""
        spans, base = self._rows[index][1 : 1 + 2 * len(PARTS)], self.blocks[block].start
        return tuple(
            None if at < 0 else data[at - base : at - base + size] for at, size in zip(spans[::2], spans[1::2])
        )


def _blocks(samples: np.ndarray) -> list[Block]:
    """Consecutive samples grouped by the `BLOCK_BYTES` stretch their first member starts in
    (a refused key, which reads nothing, joins the block before it)."""
    if not len(samples):
        return []
    present = np.stack([samples[f"{part}_at"] for part in PARTS])
    usable = samples["problem"] == 0
    first_byte = np.where(present >= 0, present, np.iinfo(np.int64).max).min(axis=0)
    first_byte = np.maximum.accumulate(np.where(usable, first_byte, 0))
    stretch = first_byte // BLOCK_BYTES
    cuts = [0, *(np.flatnonzero(np.diff(stretch)) + 1).tolist(), len(samples)]
    ends = np.stack([samples[f"{part}_at"] + samples[f"{part}_size"] for part in PARTS]).max(axis=0)
    blocks = []
    for first, stop in itertools.pairwise(cuts):
        good = usable[first:stop]
        if good.any():
            start = int(np.where(present[:, first:stop] >= 0, present[:, first:stop], np.iinfo(np.int64).max).min())
            blocks.append(Block(first, stop, start, int(ends[first:stop][good].max())))
        else:
            blocks.append(Block(first, stop, 0, 0))
    return blocks
