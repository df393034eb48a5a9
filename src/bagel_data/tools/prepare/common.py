"""Shared pieces of the prepare tools: the report, the row loop, the shard writer.

The per-format modules (t2i, edit, vlm) build on these: `manifest_rows` reads a manifest,
`each_row` runs a row handler that raises `RowDropped` for a bad row, `image_bytes` loads
an image as the readers will decode it, `ShardWriter` writes parquet shards.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import io
import json
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from ...errors import BagelDataError, ConfigError, SkipReason
from ...media.images import ImageDecodeError, ImageTooLargeError, decode_image

Progress = Callable[[int, int], None]  # (rows done, rows in total)

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
ROLE_NAMES = {"user": "human", "assistant": "gpt"}
CAPTION_COLUMN = re.compile(r"caption_(\d+)$")


class DropReason(str, enum.Enum):
    """Faults only the prepare tools meet; a fault the readers also skip is a `SkipReason`."""

    VIDEO_MISSING = "video_missing"
    NO_CAPTION = "no_caption"
    CAPTION_WITHOUT_IMAGE = "caption_file_without_image"


# The report's names for the faults prepare shares with the readers (`SkipReason`); they
# predate the shared vocabulary and reports and scripts match on them, so they stay.
REPORT_NAMES: dict[SkipReason, str] = {
    SkipReason.IMAGE_MISSING: "image_missing",
    SkipReason.IMAGE_DECODE: "image_unreadable",
    SkipReason.CAPTION_INVALID: "caption_file_unreadable",
    SkipReason.JSON_INVALID: "malformed_row",
    SkipReason.SCHEMA: "malformed_row",
    SkipReason.EDIT_TOO_FEW_IMAGES: "fewer_than_two_images",
    SkipReason.EDIT_LISTS_DISAGREE: "instruction_count_mismatch",
    SkipReason.PLACEHOLDER_MISMATCH: "placeholder_mismatch",
    SkipReason.VIDEO_TAG_MISSING: "placeholder_mismatch",
    SkipReason.NO_LOSS: "no_gpt_turn",
}


def report_name(reason: SkipReason | DropReason) -> str:
    """How a prepare report names `reason`."""
    if isinstance(reason, SkipReason):
        return REPORT_NAMES[reason]
    return reason.value


class Fix(str, enum.Enum):
    IMAGE_TAG_ADDED = "image_placeholder_added"
    VIDEO_TAG_ADDED = "video_placeholder_added"
    ROLES_RENAMED = "roles_renamed"


@dataclasses.dataclass(frozen=True)
class RowNote:
    """One dropped or repaired row: where it is, why, and the particulars."""

    location: str
    reason: str
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class PrepareReport:
    rows_written: int
    files_written: tuple[Path, ...]
    dropped: tuple[RowNote, ...] = ()
    fixed: tuple[RowNote, ...] = ()

    @property
    def rows_dropped(self) -> int:
        return len(self.dropped)

    @property
    def dropped_by_reason(self) -> dict[str, tuple[str, ...]]:
        """Reason -> locations of the rows dropped for it."""
        return _by_reason(self.dropped)

    @property
    def fixed_by_reason(self) -> dict[str, tuple[str, ...]]:
        return _by_reason(self.fixed)

    def to_dict(self) -> dict:
        return {
            "rows_written": self.rows_written,
            "files_written": [str(path) for path in self.files_written],
            "dropped": [dataclasses.asdict(note) for note in self.dropped],
            "fixed": [dataclasses.asdict(note) for note in self.fixed],
        }


def _by_reason(notes: tuple[RowNote, ...]) -> dict[str, tuple[str, ...]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for note in notes:
        grouped[note.reason].append(note.location)
    return {reason: tuple(locations) for reason, locations in grouped.items()}


class RowDropped(BagelDataError):
    """Raised by per-row helpers of the prepare tools; `each_row` records it and moves on."""

    def __init__(self, reason: SkipReason | DropReason, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail

    def __reduce__(self):  # rows travel pickled to the workers of `--engine ray`
        return (RowDropped, (self.reason, self.detail))


# -- images ------------------------------------------------------------------------------
_ROOT_HINT = " (relative paths are resolved against --image-root)"


def likely_cause(report: PrepareReport) -> str:
    """Why a prepare wrote no row, in one line that says what to change."""
    if not report.dropped:
        return "the source holds no rows: check the path and its format (docs/commands/prepare.md)"
    reason, locations = max(report.dropped_by_reason.items(), key=lambda item: len(item[1]))
    share = f"{len(locations)} of {report.rows_dropped} rows"
    if reason in (report_name(SkipReason.IMAGE_MISSING), DropReason.VIDEO_MISSING.value):
        return f"{share} name media that do not exist: is --image-root right? (paths are resolved against it)"
    example = next(note for note in report.dropped if note.reason == reason)
    return f"{share} dropped as {reason}, e.g. {example.location}: {example.detail}"


def check_format(reencode: str | None) -> str | None:
    """Pillow's name of the `reencode` format (None: keep each image's own); ConfigError if unknown."""
    if reencode is None:
        return None
    fmt = "JPEG" if reencode.upper() in ("JPG", "JPEG") else reencode.upper()
    Image.init()
    if fmt not in Image.SAVE:
        raise ConfigError("reencode", reencode, f"Pillow cannot write it; use one of {sorted(Image.SAVE)}")
    return fmt


def image_bytes(path: Path, reencode: str | None = None, max_side: int | None = None) -> bytes:
    """The bytes to store for `path`: the original ones unless a new size or format is asked."""
    if not path.is_file():
        raise RowDropped(SkipReason.IMAGE_MISSING, f"{path} does not exist{_ROOT_HINT}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RowDropped(SkipReason.IMAGE_DECODE, f"{path}: {exc}") from None
    return stored_image(data, str(path), reencode, max_side)


def stored_image(data: bytes, where: str, reencode: str | None = None, max_side: int | None = None) -> bytes:
    """`data` as it will be stored: as it is unless a new size or format is asked."""
    try:
        # Decoding fully, with the reader's own function, catches truncated files too.
        image = decode_image(data)
        with Image.open(io.BytesIO(data)) as probe:
            original_format = probe.format
    except (ImageDecodeError, ImageTooLargeError, OSError) as exc:
        raise RowDropped(SkipReason.IMAGE_DECODE, f"{where}: {exc}") from None
    scale = max_side / max(image.size) if max_side else 1.0
    if reencode is None and scale >= 1.0:
        return data
    if scale < 1.0:
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        image = image.resize(size, Image.Resampling.LANCZOS)
    fmt = reencode or (original_format if original_format in Image.SAVE else "PNG")
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return buffer.getvalue()


# -- parquet shards ----------------------------------------------------------------------
class ShardWriter:
    """Rows into `part-%05d.parquet` files of `rows_per_shard` rows in groups of `rows_per_group`."""

    def __init__(self, out_dir: Path, schema: pa.Schema, rows_per_group: int, rows_per_shard: int):
        for key, value in (("rows_per_group", rows_per_group), ("rows_per_shard", rows_per_shard)):
            if value < 1:
                raise ConfigError(key, value, "must be a positive number of rows")
        self.out_dir, self.schema = out_dir, schema
        self.rows_per_group, self.rows_per_shard = rows_per_group, rows_per_shard
        self.pending: list[dict] = []
        self.writer: pq.ParquetWriter | None = None
        self.in_shard = 0
        self.files: list[Path] = []

    def add(self, row: dict) -> None:
        self.pending.append(row)
        # A shard size that is not a multiple of the group size ends with a shorter group.
        if len(self.pending) >= min(self.rows_per_group, self.rows_per_shard - self.in_shard):
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        if self.writer is None:
            self.files.append(self.out_dir / f"part-{len(self.files):05d}.parquet")
            self.writer = pq.ParquetWriter(self.files[-1], self.schema)
        table = pa.Table.from_pylist(self.pending, schema=self.schema)
        self.writer.write_table(table, row_group_size=len(self.pending))
        self.in_shard += len(self.pending)
        self.pending = []
        if self.in_shard >= self.rows_per_shard:
            self._close_shard()

    def _close_shard(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.writer, self.in_shard = None, 0

    def close(self) -> tuple[Path, ...]:
        try:
            self._flush()
        finally:
            self._close_shard()
        return tuple(self.files)


def prepare_out_dir(out_dir: Path, overwrite: bool) -> Path:
    """Create `out_dir`; remove its parquet files if `overwrite`, else refuse a folder holding some."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    existing = sorted(out_dir.glob("*.parquet"))
    if existing and not overwrite:
        # The readers take every parquet file of the folder: stale shards would be read too.
        raise ConfigError(
            "out_dir",
            str(out_dir),
            f"already holds {len(existing)} parquet file(s); "
            "use an empty folder or overwrite=True (--overwrite) to replace them",
        )
    for path in existing:
        path.unlink()
    return out_dir


# -- rows --------------------------------------------------------------------------------
Rows = list[tuple[str, object]]  # (location, row); a row that already failed is a `RowDropped`


@dataclasses.dataclass
class Notes:
    """The dropped and repaired rows of one prepare call, gathered into its report."""

    dropped: list[RowNote] = dataclasses.field(default_factory=list)
    fixed: list[RowNote] = dataclasses.field(default_factory=list)

    def report(self, written: int, files: tuple[Path, ...]) -> PrepareReport:
        return PrepareReport(written, files, tuple(self.dropped), tuple(self.fixed))


def each_row(rows: Rows, handle: Callable[[str, object], None], notes: Notes, progress: Progress | None) -> int:
    """Feed every row to `handle`; a `RowDropped` from it is recorded and the next row goes on."""
    written = 0
    for done, (location, row) in enumerate(rows, 1):
        try:
            if isinstance(row, RowDropped):
                raise row
            handle(location, row)
            written += 1
        except RowDropped as bad:
            notes.dropped.append(RowNote(location, report_name(bad.reason), bad.detail))
        if progress is not None:
            progress(done, len(rows))
    return written


def manifest_rows(manifest: Path) -> Rows:
    """The rows of a CSV or JSONL manifest, located by file name and line number."""
    rows: Rows = []
    # utf-8-sig: spreadsheet exports often start with a byte-order mark.
    with manifest.open(encoding="utf-8-sig", newline="") as handle:
        if manifest.suffix.lower() == ".csv":
            reader = csv.DictReader(handle)
            if "path" not in (reader.fieldnames or []):
                raise ConfigError("manifest", str(manifest), "a CSV manifest needs a 'path' column")
            return [(f"{manifest.name}:{reader.line_num}", row) for row in reader]
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    rows.append((f"{manifest.name}:{number}", json.loads(line)))
                except ValueError as exc:
                    rows.append((f"{manifest.name}:{number}", RowDropped(SkipReason.JSON_INVALID, f"not JSON: {exc}")))
    return rows


# -- T2I ---------------------------------------------------------------------------------
def caption_values(value: object) -> list[str]:
    """Captions from a sidecar/manifest value: a string, a list of strings or an object of them."""
    values = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else [value]
    texts = [text for text in values if isinstance(text, str)]
    if len(texts) != len(values):
        raise RowDropped(SkipReason.CAPTION_INVALID, "captions must be strings")
    return [text.strip() for text in texts if text.strip()]
