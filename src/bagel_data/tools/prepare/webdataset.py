"""T2I rows from WebDataset / img2dataset tar shards: per key an image plus `.txt` and/or `.json`.

A key is a member's path up to the first dot of its file name (`00000/000000012.jpg` and
`00000/000000012.txt` share the key `00000/000000012`). Listing reads only the tar headers;
each row keeps the offset and size of its members, so a worker reads just its own bytes.
"""

from __future__ import annotations

import dataclasses
import tarfile
from pathlib import Path

from ...errors import ConfigError, SkipReason
from .common import IMAGE_SUFFIXES, Rows, sidecar_captions
from .report import DropReason, RowDropped
from .stored_images import stored_image


@dataclasses.dataclass(frozen=True)
class TarMember:
    tar: str
    name: str
    offset: int
    size: int

    def read(self) -> bytes:
        with open(self.tar, "rb") as handle:
            handle.seek(self.offset)
            return handle.read(self.size)


@dataclasses.dataclass(frozen=True)
class TarSample:
    image: TarMember | None = None
    txt: TarMember | None = None
    json: TarMember | None = None


def tar_files(source: Path) -> list[Path]:
    """`source` itself if it is a `.tar`, else the `.tar` files at the top of a folder."""
    if source.is_file():
        return [source] if source.suffix.lower() == ".tar" else []
    return sorted(path for path in source.glob("*.tar") if path.is_file())


def tar_rows(tars: list[Path]) -> Rows:
    """One row per key of every tar, in tar order then member order, located `tar:key`."""
    rows: Rows = []
    for tar in tars:
        samples: dict[str, dict[str, TarMember]] = {}
        twice: dict[str, list[str]] = {}  # key -> members that repeat a role (which one is meant?)
        try:
            with tarfile.open(tar, "r:") as archive:
                for info in archive:
                    if not info.isfile():
                        continue
                    folder, _, base = info.name.rpartition("/")
                    stem, dot, ext = base.partition(".")
                    if not dot:
                        continue
                    key = f"{folder}/{stem}" if folder else stem
                    member = TarMember(str(tar), info.name, info.offset_data, info.size)
                    role = _role(ext.lower())
                    first = samples.setdefault(key, {}).setdefault(role, member)
                    if first is not member and role != "other":
                        twice.setdefault(key, [first.name]).append(member.name)
        except (OSError, tarfile.TarError) as exc:
            raise ConfigError("source", str(tar), f"not a readable tar file: {exc}") from None
        rows += [
            (f"{tar.name}:{key}", _twice(twice[key]) if key in twice else _sample(members))
            for key, members in samples.items()
        ]
    return rows


def _role(ext: str) -> str:
    if f".{ext}" in IMAGE_SUFFIXES:
        return "image"
    return ext if ext in ("txt", "json") else "other"


def _twice(names: list[str]) -> RowDropped:
    return RowDropped(
        DropReason.MEMBER_TWICE, f"{names[:4]} give this key the same part twice; keep one member per part"
    )


def _sample(members: dict[str, TarMember]) -> TarSample | RowDropped:
    if "image" in members:
        return TarSample(members["image"], members.get("txt"), members.get("json"))
    if "txt" in members or "json" in members:
        return RowDropped(DropReason.CAPTION_WITHOUT_IMAGE, "no image file with this key")
    return RowDropped(SkipReason.IMAGE_MISSING, f"no image among {sorted(m.name for m in members.values())}")


def tar_captions(sample: TarSample) -> tuple[list[str], str]:
    """Captions from `.txt` and `.json`, read as a folder's sidecars are (`sidecar_captions`)."""
    try:
        texts = [None if member is None else member.read().decode("utf-8") for member in (sample.txt, sample.json)]
        return sidecar_captions(*texts)
    except RecursionError:
        raise RowDropped(SkipReason.CAPTION_INVALID, "the .json is nested too deeply to read") from None
    except (OSError, ValueError) as exc:  # unreadable or bad UTF-8
        raise RowDropped(SkipReason.CAPTION_INVALID, str(exc)) from None


def tar_image(sample: TarSample, reencode: str | None, max_side: int | None) -> bytes:
    assert sample.image is not None
    try:
        data = sample.image.read()
    except OSError as exc:
        raise RowDropped(SkipReason.IMAGE_DECODE, f"{sample.image.name}: {exc}") from None
    return stored_image(data, f"{Path(sample.image.tar).name}:{sample.image.name}", reencode, max_side)
