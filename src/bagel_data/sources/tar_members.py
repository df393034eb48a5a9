"""WebDataset / img2dataset tar shards: which members make a sample, and its captions.

A key is a member's path up to the first dot of its file name (`00000/000000012.jpg` and
`00000/000000012.txt` share the key `00000/000000012`); a sample is one image with its
`.txt` and/or `.json`. Listing reads only the tar headers; each member keeps its offset and
size, so a reader fetches just the bytes it needs.

`prepare t2i` (`tools/prepare/webdataset.py`) and the in-place reader (`sources/tar_index.py`,
`families/t2i_tars.py`) both group members here, so they agree on every rule: a key whose
part (image, `.txt`, `.json`) is given twice is dropped (`tar_member_given_twice`), a key
with captions but no image is `caption_file_without_image`, a key with neither is
`image_file_missing`; members that are folders or have no extension are no sample's.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import cast

from ..errors import ConfigError, RowDropped, SkipReason
from . import storage
from .captions import sidecar_captions
from .tar_walk import Damaged, Entry, walk

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
# Bytes fetched per read while listing a tar that is not on local disk: a tar's headers
# lie between its members, and one read per header would be one round trip per member.
LISTING_WINDOW = 8 << 20
# The most bytes one member a sample uses may hold: the cap on media files read anywhere.
MAX_MEMBER_BYTES = storage.MAX_MEDIA_BYTES


@dataclasses.dataclass(frozen=True)
class TarMember:
    tar: str
    name: str
    offset: int
    size: int

    def read(self) -> bytes:
        with storage.open_input(self.tar) as handle:
            handle.seek(self.offset)
            return handle.read(self.size)


@dataclasses.dataclass(frozen=True)
class TarSample:
    image: TarMember | None = None
    txt: TarMember | None = None
    json: TarMember | None = None
    cls: TarMember | None = None  # a class label (webdataset's `.cls`: an integer as text)


Keyed = list[tuple[str, "TarSample | RowDropped"]]


# Compressed tars are refused by name (`refuse_compressed`): a gzip / bzip2 / xz / zstd
# stream has no random access, so every ranged read of a block would decompress the tar
# from its start; decompressing once (`gunzip -k`) gives a tar that reads in place.
COMPRESSED_TARS = (".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tbz2", ".tar.xz", ".txz", ".tar.zst", ".tzst", ".tar.lz4")


def is_tar(name: str) -> bool:
    """A plain tar shard: `.tar` in any case (`.TAR` from some tools)."""
    return name.lower().endswith(".tar")


def refuse_compressed(key: str, where: str, names: Iterable[str]) -> None:
    """A `ConfigError` naming the compressed tars among `names`, with the fix; else nothing."""
    packed = [name for name in names if name.lower().endswith(COMPRESSED_TARS)]
    if packed:
        shown = ", ".join(packed[:3]) + (f" and {len(packed) - 3} more" if len(packed) > 3 else "")
        raise ConfigError(
            key,
            where,
            f"holds compressed tar shards ({shown}): a compressed tar has no random access, so it is not read "
            "(it would be decompressed from its start for every block). Decompress each once beside it "
            "(`gunzip -k NAME.tar.gz`, `xz -dk`, `zstd -d`: a .tar shard), then read the .tar files in place or "
            "with `bagel-data prepare t2i`",
        )


def tar_files(source: Path) -> list[Path]:
    """`source` itself if it is a `.tar`, else the `.tar` files at the top of a folder
    (`.TAR` too). A compressed tar is a `ConfigError` naming it (`refuse_compressed`), beside
    tars or alone; beside parquet tables it is no shard of theirs, and left alone."""
    if source.is_file():
        refuse_compressed("source", str(source), [source.name])
        return [source] if is_tar(source.name) else []
    files = sorted(path for path in source.iterdir() if path.is_file()) if source.is_dir() else []
    tars = [path for path in files if is_tar(path.name)]
    if tars or not any(path.suffix == ".parquet" for path in files):  # tables may keep an archive beside
        refuse_compressed("source", str(source), [path.name for path in files])
    return tars


def member_role(ext: str) -> str:
    """The part a member with extension `ext` (lower case, no dot) plays in its sample."""
    if f".{ext}" in IMAGE_SUFFIXES:
        return "image"
    return ext if ext in ("txt", "json", "cls") else "other"


def group_members(tar: str, entries: Iterable[Entry]) -> Keyed:
    """`(key, TarSample or RowDropped)` per key of `entries` (`(name, data offset, size)` of
    each file member, in tar order, and the `Damaged` stretches between them), keys in the
    order they first appear; a damaged stretch is an entry of its own, labelled by its bytes."""
    order: list[str | Damaged] = []
    samples: dict[str, dict[str, TarMember]] = {}
    twice: dict[str, list[str]] = {}  # key -> members that repeat a part (which one is meant?)
    seen: dict[str, int] = {}  # key -> the number of damaged stretches before its first member
    split: dict[str, Damaged] = {}  # key -> a damaged stretch between its members
    damages: list[Damaged] = []
    for entry in entries:
        if isinstance(entry, Damaged):
            order.append(entry)
            damages.append(entry)
            continue
        name, offset, size = entry
        folder, _, base = name.rpartition("/")
        stem, dot, ext = base.partition(".")
        if not dot:
            continue
        key = f"{folder}/{stem}" if folder else stem
        if key not in samples:
            order.append(key)
            seen[key] = len(damages)
        elif seen[key] < len(damages):
            split.setdefault(key, damages[-1])
        member = TarMember(tar, name, offset, size)
        role = member_role(ext.lower())
        first = samples.setdefault(key, {}).setdefault(role, member)
        if first is not member and role != "other":
            twice.setdefault(key, [first.name]).append(member.name)
    return [_entry(item, samples, twice, split) for item in order]


def _entry(item, samples, twice, split) -> tuple[str, TarSample | RowDropped]:
    if isinstance(item, Damaged):
        detail = (
            f"bytes {item.start} to {item.end} of the tar are no tar header and no member's data (damaged or "
            "zeroed); the members there are lost, the walk went on at the next valid header"
        )
        return item.label(), RowDropped(SkipReason.TAR_DAMAGED, detail)
    if item in split:
        where = split[item]
        detail = f"its members lie on both sides of damaged bytes {where.start} to {where.end}: one may be lost there"
        return item, RowDropped(SkipReason.TAR_DAMAGED, detail)
    return item, _twice(twice[item]) if item in twice else _sample(samples[item])


def _twice(names: list[str]) -> RowDropped:
    return RowDropped(
        SkipReason.MEMBER_TWICE, f"{names[:4]} give this key the same part twice; keep one member per part"
    )


def _sample(members: dict[str, TarMember]) -> TarSample | RowDropped:
    large = [m for role, m in members.items() if role != "other" and m.size > MAX_MEMBER_BYTES]
    if large:
        return RowDropped(
            SkipReason.TAR_MEMBER_TOO_LARGE,
            f"{large[0].name} holds {large[0].size} bytes, over the {MAX_MEMBER_BYTES}-byte limit on media",
        )
    if "image" in members:
        return TarSample(members["image"], members.get("txt"), members.get("json"), members.get("cls"))
    if "txt" in members or "json" in members:
        return RowDropped(SkipReason.CAPTION_WITHOUT_IMAGE, "no image file with this key")
    return RowDropped(SkipReason.IMAGE_MISSING, f"no image among {sorted(m.name for m in members.values())}")


def list_tar(path: str) -> Keyed:
    """The samples of the tar at `path` (local or a URI), from its headers alone, damaged
    stretches counted (`tar_walk.walk`). Raises OSError or `tarfile.TarError` when the tar
    cannot be read to its end (a truncated one)."""
    with storage.open_input(path) as handle:
        readable = handle if isinstance(handle, io.BufferedReader) else _Window(handle)  # local: the OS reads ahead
        size = readable.seek(0, 2)
        return group_members(path, walk(readable, size))


def sample_captions(txt: bytes | None, js: bytes | None) -> tuple[list[str], str]:
    """A sample's captions from its `.txt` and `.json` bytes, read as a folder's sidecars
    are (`sidecar_captions`), and where they came from; RowDropped when they cannot be read."""
    try:
        texts = [None if data is None else data.decode("utf-8") for data in (txt, js)]
        return sidecar_captions(*texts)
    except RecursionError:
        raise RowDropped(SkipReason.CAPTION_INVALID, "the .json is nested too deeply to read") from None
    except ValueError as exc:  # bad UTF-8
        raise RowDropped(SkipReason.CAPTION_INVALID, str(exc)) from None


class _Window:
    """A read-only file over `handle` that reads `LISTING_WINDOW` bytes at a time, so that
    walking a tar's headers costs one read per window, not one per member."""

    def __init__(self, handle, window: int = LISTING_WINDOW):
        self._handle, self._window = handle, window
        self._start, self._data, self._position = 0, b"", 0

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 1:
            offset += self._position
        elif whence == 2:
            offset += self._size()
        self._position = offset
        return offset

    def _size(self) -> int:
        size = self._handle.size
        return int(size() if callable(size) else size)

    def tell(self) -> int:
        return self._position

    def read(self, size: int = -1) -> bytes:
        parts = []
        while size != 0:
            inside = self._position - self._start
            if not 0 <= inside < len(self._data):
                self._handle.seek(self._position)
                self._start, self._data = self._position, self._handle.read(max(self._window, size))
                inside = 0
                if not self._data:
                    break
            part = self._data[inside:] if size < 0 else self._data[inside : inside + size]
            parts.append(part)
            self._position += len(part)
            size = size - len(part) if size > 0 else size
        return b"".join(parts)


def load_class_names(value: object, where: str) -> list[str] | None:
    """`class_names` of a group: a list of names (label i is item i), or a text file of
    one name per line; None when not given."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            with open(value, encoding="utf-8") as handle:
                names = [line.strip() for line in handle if line.strip()]
        except OSError as exc:
            raise ConfigError(where, value, f"cannot read the class-name file: {exc}") from None
    else:
        names = [str(name) for name in cast("Iterable[object]", value)]  # the schema checked: a list
    if not names:
        raise ConfigError(where, value, "holds no class names; give one name per class, label 0 first")
    return names


def class_caption(cls: bytes | None, class_names: Sequence[str] | None) -> list[str] | None:
    """The caption of a class-labelled sample (`.cls`, as webdataset writes an int): its
    class's name from `class_names`; None when the sample has no label or no names are given.
    A label that is not an index of the names drops the row."""
    if cls is None or not class_names:
        return None
    try:
        label = int(cls.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise RowDropped(SkipReason.CAPTION_INVALID, f"the .cls holds {cls[:40]!r}, not a class number") from None
    if not 0 <= label < len(class_names):
        raise RowDropped(
            SkipReason.CAPTION_INVALID, f"class {label} is not in class_names ({len(class_names)} names, from 0)"
        )
    return [class_names[label]]
