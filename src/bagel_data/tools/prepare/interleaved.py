"""Interleaved shards, their parquet_info and a ready run config from OBELICS-style JSONL.

Each input line is one document `{"texts": [...], "images": [...]}`: two aligned lists where
exactly one of the two is non-null at each position (the text there, or the image's path
relative to `image_root`). The output folder holds `part-NNNNN.parquet` (one `segments`
column, image bytes embedded), `parquet_info.json`, `dataset_info.yaml` and `run.yaml`,
which `bagel-data run / validate / inspect` take as they are.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ...errors import ConfigError, SkipReason
from ...families.interleaved import DEFAULTS, INTERLEAVED_SCHEMA, check_segment_defaults
from .common import Progress, each_row, manifest_rows
from .edit import write_parquet_info
from .report import Notes, PrepareReport, RowDropped
from .shards import ShardWriter, prepare_out_dir
from .stored_images import image_bytes

GROUP = "interleaved"
IMAGE_TRANSFORM = {"image_stride": 16, "max_image_size": 512, "min_image_size": 256}
VIT_TRANSFORM = {"image_stride": 14, "max_image_size": 518, "min_image_size": 224}


def document_segments(row: object, image_root: Path) -> dict:
    if not isinstance(row, dict):
        raise RowDropped(SkipReason.SCHEMA, "a document must be a JSON object with 'texts' and 'images'")
    texts, images = row.get("texts"), row.get("images")
    if not isinstance(texts, list) or not isinstance(images, list) or len(texts) != len(images):
        raise RowDropped(SkipReason.SCHEMA, "'texts' and 'images' must be lists of the same length")
    segments: list[dict[str, object]] = []
    for position, (text, image) in enumerate(zip(texts, images)):
        if (text is None) == (image is None):
            raise RowDropped(SkipReason.SCHEMA, f"position {position}: exactly one of text and image must be set")
        if text is not None:
            if not isinstance(text, str) or not text.strip():
                raise RowDropped(SkipReason.SCHEMA, f"position {position}: the text must be a non-empty string")
            segments.append({"type": "text", "text": text})
        elif not isinstance(image, str) or "://" in image:
            raise RowDropped(SkipReason.SCHEMA, f"position {position}: an image must be a local path, got {image!r}")
        else:
            segments.append({"type": "image", "image": image_bytes(image_root / image, root=image_root)})
    if not any(segment["type"] == "text" for segment in segments):
        raise RowDropped(SkipReason.NO_CAPTION, "the document has no text")
    return {"segments": segments}


# A small set still gets this many row groups (the family's units), so that the run.yaml
# written beside it works with several DataLoader workers (and ranks) as written.
MIN_ROW_GROUPS = 8


def row_group_size(rows_per_group: int, num_rows: int) -> int:
    """`rows_per_group`, smaller when `num_rows` would give fewer than MIN_ROW_GROUPS groups."""
    return max(1, min(rows_per_group, -(-num_rows // MIN_ROW_GROUPS)))


def write_run_config(out_dir: Path, num_files: int, segment_defaults: dict) -> tuple[Path, Path]:
    """`dataset_info.yaml` (paths relative to it) and `run.yaml` for the shards in `out_dir`;
    both are returned, so that the summary names every file written."""
    info = {GROUP: {"docs": {"data_dir": ".", "parquet_info_path": "parquet_info.json"}}}
    (out_dir / "dataset_info.yaml").write_text(yaml.safe_dump(info, sort_keys=False), encoding="utf-8")
    group = {
        "dataset_names": ["docs"],
        "num_used_data": [num_files],
        "weight": 1,
        "image_transform_args": IMAGE_TRANSFORM,
        "vit_image_transform_args": VIT_TRANSFORM,
        "segment_defaults": segment_defaults,
    }
    run = {"grouped_datasets": {GROUP: group}, "dataset_info": "dataset_info.yaml", "packing": {}}
    target = out_dir / "run.yaml"
    target.write_text(yaml.safe_dump(run, sort_keys=False), encoding="utf-8")
    return out_dir / "dataset_info.yaml", target


def prepare_interleaved(
    docs_jsonl: str | Path,
    out_dir: str | Path,
    *,
    image_root: str | Path | None = None,
    rows_per_group: int = 64,
    rows_per_shard: int = 1024,
    segment_defaults: dict | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> PrepareReport:
    """Write interleaved shards, parquet_info.json, dataset_info.yaml and run.yaml.

    Row groups are the family's sharding unit: keep them small enough that every worker of
    every rank gets some. `segment_defaults` (the group's roles, see
    docs/formats/interleaved.md) goes into run.yaml as given, the defaults otherwise.
    """
    docs, notes = Path(docs_jsonl), Notes()
    if not docs.is_file():
        raise ConfigError("docs_jsonl", str(docs), "the file does not exist")
    defaults = check_segment_defaults("segment_defaults", segment_defaults or dict(DEFAULTS))
    root = Path(image_root or docs.parent)
    rows = manifest_rows(docs)
    out = prepare_out_dir(Path(out_dir), overwrite)
    writer = ShardWriter(out, INTERLEAVED_SCHEMA, row_group_size(rows_per_group, len(rows)), rows_per_shard)
    try:
        written = each_row(rows, lambda _, row: writer.add(document_segments(row, root)), notes, progress)
    finally:
        files = writer.close()
    if not files:
        return notes.report(written, ())
    info = write_parquet_info(out, files)
    return notes.report(written, (*files, info, *write_run_config(out, len(files), defaults)))
