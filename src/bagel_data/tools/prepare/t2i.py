"""T2I shards from a folder of images with sidecar captions, or a JSONL/CSV manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

from ...errors import ConfigError, SkipReason
from ...formats import T2I_SCHEMA
from .common import CAPTION_COLUMN, IMAGE_SUFFIXES, Progress, Rows, caption_values, each_row, manifest_rows
from .report import DropReason, Notes, PrepareReport, RowDropped
from .shards import ShardWriter, prepare_out_dir
from .stored_images import check_format, image_bytes


def _sidecar_captions(image: Path) -> tuple[Path, list[str]] | RowDropped:
    captions: list[str] = []
    txt, js = image.with_suffix(".txt"), image.with_suffix(".json")
    try:
        if txt.is_file():
            captions += [line.strip() for line in txt.read_text(encoding="utf-8").splitlines() if line.strip()]
        if js.is_file():
            captions += caption_values(json.loads(js.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:  # unreadable, bad UTF-8 or bad JSON
        return RowDropped(SkipReason.CAPTION_INVALID, str(exc)[:200])
    except RecursionError:
        return RowDropped(SkipReason.CAPTION_INVALID, f"{js.name}: JSON nested too deeply to read")
    except RowDropped as bad:
        return bad
    return image, captions


def folder_rows(root: Path) -> Rows:
    files = sorted(path for path in root.rglob("*") if path.is_file())
    images = [path for path in files if path.suffix.lower() in IMAGE_SUFFIXES]
    stems = {path.with_suffix("") for path in images}
    orphan = RowDropped(DropReason.CAPTION_WITHOUT_IMAGE, "no image file with this name")
    rows: Rows = [(str(path.relative_to(root)), _sidecar_captions(path)) for path in images]
    rows += [(str(path.relative_to(root)), orphan) for path in files
             if path.suffix.lower() in (".txt", ".json") and path.with_suffix("") not in stems]  # fmt: skip
    return rows


def _manifest_captions(row: object, image_root: Path) -> tuple[Path, list[str]]:
    if not isinstance(row, dict) or not isinstance(row.get("path"), str) or not row["path"]:
        raise RowDropped(SkipReason.SCHEMA, "a row needs a non-empty string 'path'")
    numbered = sorted((int(m.group(1)), key) for key in row if (m := CAPTION_COLUMN.match(key)))
    values = [row.get("caption")] + [row[key] for _, key in numbered]
    captions = [text.strip() for text in values if isinstance(text, str) and text.strip()]
    if row.get("captions") is not None:
        captions += caption_values(row["captions"])
    return image_root / row["path"], captions


def numbered_captions(captions: list[str]) -> str:
    if not captions:
        raise RowDropped(DropReason.NO_CAPTION, "no caption text found for this image")
    numbered = {f"caption_{i}": text for i, text in enumerate(dict.fromkeys(captions), 1)}
    return json.dumps(numbered, ensure_ascii=False)


def t2i_row(row: object, from_folder: bool, root: Path, fmt: str | None, max_side: int | None) -> dict:
    """One output row from a folder row `(image path, captions)` or a manifest row."""
    pair = row if from_folder else _manifest_captions(row, root)
    path, captions = cast("tuple[Path, list[str]]", pair)
    text = numbered_captions(captions)
    # A manifest row names its image: it must lie under the image root (a folder row was found there).
    return {"image": image_bytes(path, fmt, max_side, root=None if from_folder else root), "captions": text}


def prepare_t2i(
    source: str | Path,
    out_dir: str | Path,
    *,
    rows_per_group: int = 100,
    rows_per_shard: int = 1000,
    reencode: str | None = None,
    max_side: int | None = None,
    image_root: str | Path | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> PrepareReport:
    """Write T2I parquet shards from a folder of images with caption sidecars or a manifest.

    `source` is a folder (captions in `<stem>.txt`, one per line, and/or `<stem>.json`, a
    list or an object of captions) or a `.csv`/`.jsonl` manifest with `path` and caption
    columns (`caption`, `caption_1`, ..., or a `captions` list/object); manifest paths are
    relative to `image_root`, by default the manifest's folder. Images keep their encoded
    bytes unless `reencode` (a Pillow format) or `max_side` (longest side, aspect kept) asks
    for new ones.
    """
    source, notes = Path(source), Notes()
    fmt = check_format(reencode)
    if max_side is not None and max_side < 1:
        raise ConfigError("max_side", max_side, "must be a positive number of pixels")
    if not source.exists():
        raise ConfigError("source", str(source), "neither a folder nor a manifest file")
    from_folder = source.is_dir()
    rows = folder_rows(source) if from_folder else manifest_rows(source)
    root = Path(image_root or source.parent)
    writer = ShardWriter(prepare_out_dir(Path(out_dir), overwrite), T2I_SCHEMA, rows_per_group, rows_per_shard)

    def handle(location: str, row: object) -> None:
        writer.add(t2i_row(row, from_folder, root, fmt, max_side))

    try:
        written = each_row(rows, handle, notes, progress)
    finally:
        files = writer.close()
    return notes.report(written, files)
