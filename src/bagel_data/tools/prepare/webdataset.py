"""T2I rows from WebDataset / img2dataset tar shards: per key an image plus `.txt` and/or `.json`.

The member rules (keys, parts, duplicates, missing parts) and the caption rules are
`sources/tar_members.py`'s, shared with the in-place tar reader; this module turns them into
prepare's rows, located `tar:key`.
"""

from __future__ import annotations

import tarfile
from collections.abc import Sequence
from pathlib import Path

from ...errors import ConfigError, RowDropped, SkipReason
from ...sources.tar_members import TarSample, class_caption, list_tar, sample_captions, tar_files
from .common import Rows
from .stored_images import stored_image

__all__ = ["TarSample", "tar_captions", "tar_files", "tar_image", "tar_rows"]


def tar_rows(tars: list[Path]) -> Rows:
    """One row per key of every tar, in tar order then member order, located `tar:key`."""
    rows: Rows = []
    for tar in tars:
        try:
            samples = list_tar(str(tar))
        except (OSError, tarfile.TarError) as exc:
            raise ConfigError("source", str(tar), f"not a readable tar file: {exc}") from None
        rows += [(f"{tar.name}:{key}", sample) for key, sample in samples]
    return rows


def tar_captions(sample: TarSample, class_names: Sequence[str] | None = None) -> tuple[list[str], str]:
    """Captions from `.txt` and `.json`, read as a folder's sidecars are (`sidecar_captions`);
    a sample labelled by a `.cls` only, from `class_names` (`--class-names`)."""
    if sample.cls is not None and sample.txt is None and sample.json is None:
        if not class_names:
            raise RowDropped(SkipReason.NO_CAPTION, "labelled by a .cls only: pass --class-names FILE (one class "
                             "name a line, label 0 first) to caption it by its class's name")  # fmt: skip
        try:
            label = sample.cls.read()
        except OSError as exc:
            raise RowDropped(SkipReason.CAPTION_INVALID, str(exc)) from None
        return class_caption(label, class_names) or [], ".cls class name"
    try:
        texts = [None if member is None else member.read() for member in (sample.txt, sample.json)]
    except OSError as exc:
        raise RowDropped(SkipReason.CAPTION_INVALID, str(exc)) from None
    return sample_captions(*texts)


def tar_image(sample: TarSample, reencode: str | None, max_side: int | None) -> bytes:
    assert sample.image is not None
    try:
        data = sample.image.read()
    except OSError as exc:
        raise RowDropped(SkipReason.IMAGE_DECODE, f"{sample.image.name}: {exc}") from None
    return stored_image(data, f"{Path(sample.image.tar).name}:{sample.image.name}", reencode, max_side)
