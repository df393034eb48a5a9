"""Edit shards and their parquet_info from a JSONL manifest of image chains."""

from __future__ import annotations

from pathlib import Path

from ...errors import ConfigError, SkipReason, counted
from ...formats import EDIT_SCHEMA
from ...sources.parquet import write_parquet_info
from .common import Progress, each_row, manifest_rows
from .report import Notes, PrepareReport, RowDropped
from .shards import ShardWriter, prepare_out_dir
from .stored_images import image_bytes


def edit_row(row: object, image_root: Path) -> dict:
    if not isinstance(row, dict):
        raise RowDropped(SkipReason.SCHEMA, "a row must be a JSON object")
    images, steps = row.get("images"), row.get("instructions")
    if not isinstance(images, list) or not all(isinstance(name, str) and name for name in images):
        raise RowDropped(SkipReason.SCHEMA, "'images' must be a list of file names")
    if len(images) < 2:
        raise RowDropped(SkipReason.EDIT_TOO_FEW_IMAGES, f"{len(images)} image(s); an edit chain needs at least 2")
    if not isinstance(steps, list):
        raise RowDropped(SkipReason.SCHEMA, "'instructions' must be a list with one entry per edit step")
    # A lone string is accepted as the only phrasing of its step.
    steps = [[step] if isinstance(step, str) else step for step in steps]
    if not all(isinstance(step, list) and step and all(isinstance(t, str) and t for t in step) for step in steps):
        raise RowDropped(SkipReason.SCHEMA, "each instruction step must be a non-empty list of strings")
    if len(steps) != len(images) - 1:
        raise RowDropped(
            SkipReason.EDIT_LISTS_DISAGREE,
            f"{counted(len(images), 'image')} need {counted(len(images) - 1, 'step')}, got {len(steps)}",
        )
    return {
        "image_list": [image_bytes(image_root / name, root=image_root) for name in images],
        "instruction_list": steps,
    }


def prepare_edit(
    manifest_jsonl: str | Path,
    out_dir: str | Path,
    *,
    rows_per_group: int = 16,
    rows_per_shard: int = 1024,
    image_root: str | Path | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
    data_dir: str | None = None,
) -> PrepareReport:
    """Write edit parquet shards and `parquet_info.json` from a JSONL manifest.

    Each row is `{"images": [path, ...], "instructions": [[phrasing, ...], ...]}` with one
    instruction step per consecutive image pair. Paths are relative to `image_root`, by
    default the manifest's folder. Row groups are the edit family's sharding unit, so
    small groups spread a dataset over more workers. `parquet_info.json` is keyed by
    `os.path.join(data_dir, file name)`, `data_dir` defaulting to `out_dir` made absolute:
    pass the `data_dir` the training's `dataset_info` will use if it differs.
    """
    manifest, notes = Path(manifest_jsonl), Notes()
    if not manifest.is_file():
        raise ConfigError("manifest_jsonl", str(manifest), "the file does not exist")
    root = Path(image_root or manifest.parent)
    rows = manifest_rows(manifest)
    out = prepare_out_dir(Path(out_dir), overwrite)
    writer = ShardWriter(out, EDIT_SCHEMA, rows_per_group, rows_per_shard)
    try:
        written = each_row(rows, lambda _, row: writer.add(edit_row(row, root)), notes, progress)
    finally:
        files = writer.close()
    if not files:  # a parquet_info.json of {} would read as an empty dataset, not a failed prepare
        return notes.report(written, files)
    return notes.report(written, (*files, write_parquet_info(out, files, data_dir)))
