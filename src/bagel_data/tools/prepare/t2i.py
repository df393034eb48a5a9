"""T2I shards from a folder of images with sidecar captions, or a JSONL/CSV manifest."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

from ...errors import ConfigError, SkipReason
from ...formats import T2I_SCHEMA
from ...sources.table_cells import CellError, caption_cells, image_cell, resolve_columns
from .common import (
    IMAGE_SUFFIXES,
    SOURCE_KEY,
    Progress,
    Rows,
    caption_values,
    each_row,
    manifest_rows,
    numbered_caption_keys,
    numbered_captions,
    sidecar_captions,
)
from .report import Notes, PrepareReport, RowDropped
from .shards import ShardWriter, prepare_out_dir
from .stored_images import check_format, image_bytes, stored_image
from .tables import TableRow, parquet_files, read_cells, read_schema, table_rows


def _sidecar_captions(image: Path) -> tuple[Path, list[str], str] | RowDropped:
    txt, js = image.with_suffix(".txt"), image.with_suffix(".json")
    try:
        texts = [path.read_text(encoding="utf-8") if path.is_file() else None for path in (txt, js)]
        captions, source = sidecar_captions(*texts)
    except (OSError, ValueError) as exc:  # unreadable or bad UTF-8
        return RowDropped(SkipReason.CAPTION_INVALID, str(exc)[:200])
    except RecursionError:
        return RowDropped(SkipReason.CAPTION_INVALID, f"{js.name}: JSON nested too deeply to read")
    except RowDropped as bad:
        return bad
    return image, captions, source


def _img2dataset_stats(path: Path) -> bool:
    """img2dataset's `NNNNN_stats.json`, written beside the folder (or parquet) of shard NNNNN."""
    shard = path.name.removesuffix("_stats.json")
    if shard == path.name:
        return False
    return (path.parent / shard).is_dir() or (path.parent / f"{shard}.parquet").is_file()


def folder_rows(root: Path) -> Rows:
    """One row per image under `root` (recursively), with its sidecar captions; a caption
    file without an image is a dropped row. This reads img2dataset's "files" output as is
    (`00000/000000001.jpg` with `.txt`/`.json` beside it; its `_stats.json` and `.parquet`
    files are not rows)."""
    files = sorted(path for path in root.rglob("*") if path.is_file())
    images = [path for path in files if path.suffix.lower() in IMAGE_SUFFIXES]
    stems = {path.with_suffix("") for path in images}
    orphan = RowDropped(SkipReason.CAPTION_WITHOUT_IMAGE, "no image file with this name")
    rows: Rows = [(str(path.relative_to(root)), _sidecar_captions(path)) for path in images]
    rows += [(str(path.relative_to(root)), orphan) for path in files
             if path.suffix.lower() in (".txt", ".json") and path.with_suffix("") not in stems
             and not _img2dataset_stats(path)]  # fmt: skip
    return rows


def _manifest_captions(row: object, image_root: Path) -> tuple[Path, list[str]]:
    if not isinstance(row, dict) or not isinstance(row.get("path"), str) or not row["path"]:
        raise RowDropped(SkipReason.SCHEMA, "a row needs a non-empty string 'path'")
    values = [row.get("caption")] + [row[key] for _, key in numbered_caption_keys(row)]
    captions = [text.strip() for text in values if isinstance(text, str) and text.strip()]
    if row.get("captions") is not None:
        captions += caption_values(row["captions"])
    return image_root / row["path"], captions


def t2i_row(row: object, from_folder: bool, root: Path, fmt: str | None, max_side: int | None) -> dict:
    """One output row from a folder row `(image path, captions, source)` or a manifest row;
    a folder row names where its captions came from under `SOURCE_KEY`."""
    if not from_folder:
        path, captions = _manifest_captions(row, root)
        # A manifest row names its image: it must lie under the image root (a folder row was found there).
        return {"image": image_bytes(path, fmt, max_side, root=root), "captions": numbered_captions(captions)}
    path, captions, source = cast("tuple[Path, list[str], str]", row)
    text = numbered_captions(captions)
    return {"image": image_bytes(path, fmt, max_side), "captions": text, SOURCE_KEY: source}


def table_columns(
    files: list[Path], image_column: str | None, caption_column: str | Sequence[str] | None
) -> tuple[str, ...]:
    """The image and caption column(s) of table `files` (named, or found in the first file),
    checked in every file's footer before any row is read."""
    image, captions = image_column, caption_column
    columns: tuple[str, ...] = ()
    for file in files:
        columns = resolve_columns(read_schema(file), image, captions, where=str(file))
        image, captions = columns[0], list(columns[1:])
    return columns


def table_t2i_row(row: TableRow, columns: tuple[str, ...], root: Path, fmt: str | None, max_side: int | None) -> dict:
    """One output row from a table row: its image cell (bytes, a `{bytes, path}` struct or a
    path under `root`) and its caption cells (one caption column or several, in order), the
    caption columns named as the source."""
    cells = read_cells(row, columns)
    image_column, caption_columns = columns[0], columns[1:]
    try:
        captions = caption_cells([cells[column] for column in caption_columns])
    except CellError as exc:
        raise RowDropped(SkipReason.CAPTION_INVALID, f"column(s) {', '.join(caption_columns)}: {exc}") from None
    text = numbered_captions(captions)
    try:
        image = image_cell(cells[image_column])
    except CellError as exc:
        raise RowDropped(SkipReason.IMAGE_MISSING, f"column {image_column!r}: {exc}") from None
    where = f"{row.file.name} row group {row.group} row {row.position}"
    data = stored_image(image, where, fmt, max_side) if isinstance(image, bytes) else None
    if data is None:
        data = image_bytes(root / str(image), fmt, max_side, root=root)
    return {"image": data, "captions": text, SOURCE_KEY: f"column {', '.join(caption_columns)}"}


def prepare_t2i(
    source: str | Path,
    out_dir: str | Path,
    *,
    rows_per_group: int = 100,
    rows_per_shard: int = 1000,
    reencode: str | None = None,
    max_side: int | None = None,
    image_root: str | Path | None = None,
    image_column: str | None = None,
    caption_column: str | Sequence[str] | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
    split: str | None = None,
) -> PrepareReport:
    """Write T2I parquet shards from a folder of images with caption sidecars or a manifest.

    `source` is a folder (captions in `<stem>.txt`, one per line, and/or `<stem>.json`: a
    list of captions, or an object whose first caption key, `CAPTION_KEYS`, is used) or a `.csv`/`.jsonl` manifest with `path` and caption
    columns (`caption`, `caption_1`, ..., or a `captions` list/object), or parquet tables (a
    `.parquet` file or a folder of them, e.g. a Hugging Face `datasets` export) whose
    `image_column` and `caption_column` (default: `image`/`text` and their usual aliases,
    `sources/table_cells.py`) hold the images and captions. Manifest and table paths are
    relative to `image_root`, by default the manifest's (a table folder's) folder. A folder of
    Hub-style split tables gives its `split` (default train; `sources/splits.py`). Images
    keep their encoded bytes unless `reencode` (a Pillow format) or `max_side` (longest side, aspect kept) asks
    for new ones.
    """
    source, notes = Path(source), Notes()
    fmt = check_format(reencode)
    if max_side is not None and max_side < 1:
        raise ConfigError("max_side", max_side, "must be a positive number of pixels")
    if not source.exists():
        raise ConfigError("source", str(source), "neither a folder nor a manifest file")
    tables = parquet_files(source, split)
    columns = table_columns(tables, image_column, caption_column) if tables else None
    from_folder = source.is_dir()
    rows = table_rows(tables) if tables else folder_rows(source) if from_folder else manifest_rows(source)
    root = Path(image_root or (source if tables and from_folder else source.parent))
    writer = ShardWriter(prepare_out_dir(Path(out_dir), overwrite), T2I_SCHEMA, rows_per_group, rows_per_shard)

    def handle(location: str, row: object) -> None:
        if columns is not None:
            record = table_t2i_row(cast(TableRow, row), columns, root, fmt, max_side)
        else:
            record = t2i_row(row, from_folder, root, fmt, max_side)
        notes.count_source(record.pop(SOURCE_KEY, None))
        writer.add(record)

    try:
        written = each_row(rows, handle, notes, progress)
    finally:
        files = writer.close()
    return notes.report(written, files)
