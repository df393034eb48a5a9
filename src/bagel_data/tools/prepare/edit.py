"""Edit shards and their parquet_info from image chains (JSONL) or (source, instruction,
target) triples (JSONL, CSV or parquet, e.g. a Hugging Face `datasets` export)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar, cast

from ...errors import ConfigError, SkipReason, counted
from ...formats import EDIT_SCHEMA
from ...sources.parquet import write_parquet_info
from ...sources.table_cells import CellError, image_cell
from .common import SOURCE_KEY, Progress, Rows, each_row, manifest_rows
from .report import Notes, PrepareReport, RowDropped
from .shards import ShardWriter, prepare_out_dir
from .stored_images import image_bytes, stored_image
from .tables import TableRow, parquet_files, read_cells, read_schema, table_rows

EXPECTED_SHAPE = (
    'expected a chain {"images": [path, path, ...], "instructions": [[text, ...], ...]} (one step per image '
    'pair) or a triple {"source": image, "instruction": text, "target": image} (columns named with '
    "--source-column, --instruction-column, --target-column)"
)


# How the summary names where a (source, instruction, target) row's parts came from.
EDIT_SOURCE = "edit steps from columns: "
LATER_TURN = (
    f"{EDIT_SOURCE}later turns of multi-turn edits (turn_index > 1, as MagicBrush's), each written as its own "
    "one-step row from that turn's source image"
)


def later_turns_warning(sources: dict[str, int]) -> str | None:
    """What a summary says when multi-turn rows became one-step rows."""
    count = sources.get(LATER_TURN, 0)
    if not count:
        return None
    return (
        f"{count} row(s) are later turns of multi-turn edits (turn_index > 1): each was written as its own "
        "one-step edit (that turn's source image, instruction and target), not as a step of one chain. To train "
        'the turns as chains, give prepare edit chain rows: {"images": [turn 1 source, turn 1 target, turn 2 '
        'target, ...], "instructions": [[turn 1], [turn 2], ...]}'
    )


@dataclasses.dataclass(frozen=True)
class TripleColumns:
    """The columns of a (source, instruction, target) row; None: the first usual name present."""

    source: str | None = None
    instruction: str | None = None
    target: str | None = None

    USUAL: ClassVar[dict[str, tuple[str, ...]]] = {
        "source": ("source", "source_image", "input_image", "source_img", "original_image"),
        "instruction": ("instruction", "edit_instruction", "edit_prompt", "prompt", "text"),
        "target": ("target", "target_image", "edited_image", "target_img", "output_image"),
    }

    @property
    def named(self) -> bool:
        return any(getattr(self, role) for role in self.USUAL)

    def resolve(self, names: list[str]) -> tuple[str, str, str] | None:
        """(source, instruction, target) among `names`, or None when one is missing."""
        found = []
        for role, usual in self.USUAL.items():
            wanted = getattr(self, role)
            found.append(
                wanted if wanted in names else None if wanted else next((n for n in usual if n in names), None)
            )
        return None if None in found else cast("tuple[str, str, str]", tuple(found))


def _shape_error(row: object) -> RowDropped:
    keys = sorted(map(str, row)) if isinstance(row, dict) else type(row).__name__
    return RowDropped(SkipReason.SCHEMA, f"the row has {keys}; {EXPECTED_SHAPE}")


def edit_record(row: object, image_root: Path, columns: TripleColumns) -> dict:
    """One output row from a chain row or a triple row, told apart by their columns."""
    if not isinstance(row, dict):
        raise _shape_error(row)
    if not columns.named and ("images" in row or "instructions" in row):
        return edit_row(row, image_root)
    names = columns.resolve(list(row))
    if names is None:
        raise _shape_error(row)
    instruction = row[names[1]]
    phrasings = [instruction] if isinstance(instruction, str) else instruction
    if not isinstance(phrasings, list) or not all(isinstance(t, str) and t.strip() for t in phrasings) or not phrasings:
        raise RowDropped(SkipReason.SCHEMA, f"{names[1]!r} must be a text or a list of texts; {EXPECTED_SHAPE}")
    images = [_triple_image(row[name], name, image_root) for name in (names[0], names[2])]
    source = f"{EDIT_SOURCE}source {names[0]!r}, instruction {names[1]!r}, target {names[2]!r}"
    turn = row.get("turn_index")
    if isinstance(turn, int) and not isinstance(turn, bool) and turn > 1:
        source = LATER_TURN  # MagicBrush: a later turn of a multi-turn edit, written as one step
    return {"image_list": images, "instruction_list": [[text.strip() for text in phrasings]], SOURCE_KEY: source}


def _triple_image(value: object, column: str, root: Path) -> bytes:
    try:
        image = image_cell(value)
    except CellError as exc:
        raise RowDropped(SkipReason.IMAGE_MISSING, f"column {column!r}: {exc}") from None
    if isinstance(image, bytes):
        return stored_image(image, f"column {column!r}")
    return image_bytes(root / image, root=root)


def edit_rows(source: Path, columns: TripleColumns, split: str | None = None) -> tuple[Rows, tuple[str, ...] | None]:
    """The rows of `source` (a table folder's `split`), and for parquet tables the triple
    columns their rows are read with (checked in every file's footer: one error naming the
    columns found)."""
    tables = parquet_files(source, split)
    if not tables:
        return manifest_rows(source, required_column=None), None
    names = None
    for file in tables:
        schema = read_schema(file)
        names = (columns if names is None else TripleColumns(*names)).resolve(schema.names)
        if names is None:
            found = ", ".join(f"{field.name} ({field.type})" for field in schema)
            raise ConfigError(
                "source", str(file), f"no (source, instruction, target) columns; its columns: {found}. {EXPECTED_SHAPE}"
            )
    # MagicBrush's turn number is read too, so that later turns are counted (`LATER_TURN`).
    turns = all("turn_index" in read_schema(file).names for file in tables)
    return table_rows(tables), (*names, "turn_index") if names and turns else names


def table_or_manifest_record(row: object, root: Path, columns: TripleColumns, table: tuple | None) -> dict:
    if table is not None:
        row = read_cells(cast(TableRow, row), table)
    return edit_record(row, root, columns)


def edit_row(row: object, image_root: Path) -> dict:
    if not isinstance(row, dict):
        raise _shape_error(row)
    images, steps = row.get("images"), row.get("instructions")
    if not isinstance(images, list) or not all(isinstance(name, str) and name for name in images):
        raise RowDropped(SkipReason.SCHEMA, f"'images' must be a list of file names; {EXPECTED_SHAPE}")
    if len(images) < 2:
        raise RowDropped(SkipReason.EDIT_TOO_FEW_IMAGES, f"{len(images)} image(s); an edit chain needs at least 2")
    if not isinstance(steps, list):
        raise RowDropped(SkipReason.SCHEMA, f"'instructions' must be a list, one entry per step; {EXPECTED_SHAPE}")
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
    columns: TripleColumns = TripleColumns(),
    split: str | None = None,
) -> PrepareReport:
    """Write edit parquet shards and `parquet_info.json` from a manifest or parquet tables.

    A JSONL row is a chain `{"images": [path, ...], "instructions": [[phrasing, ...], ...]}`
    with one instruction step per consecutive image pair, or a triple (source image,
    instruction, target image) whose `columns` are named or found (`TripleColumns.USUAL`);
    CSV rows and parquet tables are triples, their image cells paths, bytes or
    `datasets.Image` structs. Paths are relative to `image_root`, by
    default the manifest's folder. Row groups are the edit family's sharding unit, so
    small groups spread a dataset over more workers. `parquet_info.json` is keyed by
    `os.path.join(data_dir, file name)`, `data_dir` defaulting to `out_dir` made absolute:
    pass the `data_dir` the training's `dataset_info` will use if it differs. A folder of
    Hub-style split tables gives its `split` (default train; `sources/splits.py`).
    """
    manifest, notes = Path(manifest_jsonl), Notes()
    if not manifest.exists():
        raise ConfigError("manifest_jsonl", str(manifest), "the file does not exist")
    root = Path(image_root or (manifest if manifest.is_dir() else manifest.parent))
    rows, table = edit_rows(manifest, columns, split)
    out = prepare_out_dir(Path(out_dir), overwrite)
    writer = ShardWriter(out, EDIT_SCHEMA, rows_per_group, rows_per_shard)

    def add(_: str, row: object) -> None:
        record = table_or_manifest_record(row, root, columns, table)
        notes.count_source(record.pop(SOURCE_KEY, None))
        writer.add(record)

    try:
        written = each_row(rows, add, notes, progress)
    finally:
        files = writer.close()
    if not files:  # a parquet_info.json of {} would read as an empty dataset, not a failed prepare
        return notes.report(written, files)
    report = notes.report(written, (*files, write_parquet_info(out, files, data_dir)))
    turns = later_turns_warning(dict(report.sources))
    return report if turns is None else dataclasses.replace(report, warnings=(*report.warnings, turns))
