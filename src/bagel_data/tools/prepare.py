"""Writing raw data in the three BAGEL formats: T2I and edit parquet shards, VLM SFT JSONL.

Each function streams its rows, keeps going past bad ones, and returns a `PrepareReport`
naming every dropped (or, for VLM, repaired) row with its location and reason, so that a
dataset is never silently smaller than its source.
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

from ..errors import ConfigError
from ..families.conversation import IMAGE_TAG, VIDEO_TAG, check_conversations, count_image_tags
from ..images import ImageDecodeError, ImageTooLargeError, decode_image

Progress = Callable[[int, int], None]  # (rows done, rows in total)

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
T2I_SCHEMA = pa.schema([("image", pa.binary()), ("captions", pa.string())])
EDIT_SCHEMA = pa.schema([("image_list", pa.list_(pa.binary())), ("instruction_list", pa.list_(pa.list_(pa.string())))])
_ROLE_NAMES = {"user": "human", "assistant": "gpt"}
_CAPTION_COLUMN = re.compile(r"caption_(\d+)$")


class DropReason(str, enum.Enum):
    IMAGE_MISSING = "image_missing"
    IMAGE_UNREADABLE = "image_unreadable"
    VIDEO_MISSING = "video_missing"
    NO_CAPTION = "no_caption"
    CAPTION_UNREADABLE = "caption_file_unreadable"
    CAPTION_WITHOUT_IMAGE = "caption_file_without_image"
    MALFORMED_ROW = "malformed_row"
    TOO_FEW_IMAGES = "fewer_than_two_images"
    LISTS_DISAGREE = "instruction_count_mismatch"
    PLACEHOLDER_MISMATCH = "placeholder_mismatch"
    NO_ANSWER = "no_gpt_turn"


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


class _Drop(Exception):
    """Raised by per-row helpers; the row loop records it and moves on."""

    def __init__(self, reason: DropReason, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


# -- images ------------------------------------------------------------------------------
def _check_format(reencode: str | None) -> str | None:
    if reencode is None:
        return None
    fmt = "JPEG" if reencode.upper() in ("JPG", "JPEG") else reencode.upper()
    Image.init()
    if fmt not in Image.SAVE:
        raise ConfigError("reencode", reencode, f"Pillow cannot write it; use one of {sorted(Image.SAVE)}")
    return fmt


def _image_bytes(path: Path, reencode: str | None = None, max_side: int | None = None) -> bytes:
    """The bytes to store for `path`: the original ones unless a new size or format is asked."""
    if not path.is_file():
        raise _Drop(DropReason.IMAGE_MISSING, f"{path} does not exist")
    try:
        data = path.read_bytes()
        # Decoding fully, with the reader's own function, catches truncated files too.
        image = decode_image(data)
        with Image.open(io.BytesIO(data)) as probe:
            original_format = probe.format
    except (ImageDecodeError, ImageTooLargeError, OSError) as exc:
        raise _Drop(DropReason.IMAGE_UNREADABLE, f"{path}: {exc}") from None
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
class _ShardWriter:
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


def _prepare_out_dir(out_dir: Path, overwrite: bool) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    existing = sorted(out_dir.glob("*.parquet"))
    if existing and not overwrite:
        # The readers take every parquet file of the folder: stale shards would be read too.
        raise ConfigError("out_dir", str(out_dir), f"already holds {len(existing)} parquet file(s); "
                          "use an empty folder or overwrite=True (--overwrite) to replace them")
    for path in existing:
        path.unlink()
    return out_dir


# -- rows --------------------------------------------------------------------------------
Rows = list[tuple[str, object]]  # (location, row); a row that already failed is a `_Drop`


@dataclasses.dataclass
class _Notes:
    dropped: list[RowNote] = dataclasses.field(default_factory=list)
    fixed: list[RowNote] = dataclasses.field(default_factory=list)

    def report(self, written: int, files: tuple[Path, ...]) -> PrepareReport:
        return PrepareReport(written, files, tuple(self.dropped), tuple(self.fixed))


def _each_row(rows: Rows, handle: Callable[[str, object], None], notes: _Notes, progress: Progress | None) -> int:
    """Feed every row to `handle`; a `_Drop` from it is recorded and the next row goes on."""
    written = 0
    for done, (location, row) in enumerate(rows, 1):
        try:
            if isinstance(row, _Drop):
                raise row
            handle(location, row)
            written += 1
        except _Drop as bad:
            notes.dropped.append(RowNote(location, bad.reason.value, bad.detail))
        if progress is not None:
            progress(done, len(rows))
    return written


def _manifest_rows(manifest: Path) -> Rows:
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
                    rows.append((f"{manifest.name}:{number}", _Drop(DropReason.MALFORMED_ROW, f"not JSON: {exc}")))
    return rows


# -- T2I ---------------------------------------------------------------------------------
def _caption_values(value: object) -> list[str]:
    """Captions from a sidecar/manifest value: a string, a list of strings or an object of them."""
    values = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else [value]
    if not all(isinstance(text, str) for text in values):
        raise _Drop(DropReason.CAPTION_UNREADABLE, "captions must be strings")
    return [text.strip() for text in values if text.strip()]


def _sidecar_captions(image: Path) -> tuple[Path, list[str]] | _Drop:
    captions: list[str] = []
    txt, js = image.with_suffix(".txt"), image.with_suffix(".json")
    try:
        if txt.is_file():
            captions += [line.strip() for line in txt.read_text(encoding="utf-8").splitlines() if line.strip()]
        if js.is_file():
            captions += _caption_values(json.loads(js.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:  # unreadable, bad UTF-8 or bad JSON
        return _Drop(DropReason.CAPTION_UNREADABLE, str(exc))
    except _Drop as bad:
        return bad
    return image, captions


def _folder_rows(root: Path) -> Rows:
    files = sorted(path for path in root.rglob("*") if path.is_file())
    images = [path for path in files if path.suffix.lower() in IMAGE_SUFFIXES]
    stems = {path.with_suffix("") for path in images}
    orphan = _Drop(DropReason.CAPTION_WITHOUT_IMAGE, "no image file with this name")
    rows: Rows = [(str(path.relative_to(root)), _sidecar_captions(path)) for path in images]
    rows += [(str(path.relative_to(root)), orphan) for path in files
             if path.suffix.lower() in (".txt", ".json") and path.with_suffix("") not in stems]  # fmt: skip
    return rows


def _manifest_captions(row: object, image_root: Path) -> tuple[Path, list[str]]:
    if not isinstance(row, dict) or not isinstance(row.get("path"), str) or not row["path"]:
        raise _Drop(DropReason.MALFORMED_ROW, "a row needs a non-empty string 'path'")
    numbered = sorted((int(m.group(1)), key) for key in row if (m := _CAPTION_COLUMN.match(key)))
    values = [row.get("caption")] + [row[key] for _, key in numbered]
    captions = [text.strip() for text in values if isinstance(text, str) and text.strip()]
    if row.get("captions") is not None:
        captions += _caption_values(row["captions"])
    return image_root / row["path"], captions


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
    source, notes = Path(source), _Notes()
    fmt = _check_format(reencode)
    if max_side is not None and max_side < 1:
        raise ConfigError("max_side", max_side, "must be a positive number of pixels")
    if not source.exists():
        raise ConfigError("source", str(source), "neither a folder nor a manifest file")
    from_folder = source.is_dir()
    rows = _folder_rows(source) if from_folder else _manifest_rows(source)
    root = Path(image_root or source.parent)
    writer = _ShardWriter(_prepare_out_dir(Path(out_dir), overwrite), T2I_SCHEMA, rows_per_group, rows_per_shard)

    def handle(location: str, row: object) -> None:
        path, captions = row if from_folder else _manifest_captions(row, root)
        if not captions:
            raise _Drop(DropReason.NO_CAPTION, "no caption text found for this image")
        numbered = {f"caption_{i}": text for i, text in enumerate(dict.fromkeys(captions), 1)}
        writer.add({"image": _image_bytes(path, fmt, max_side), "captions": json.dumps(numbered, ensure_ascii=False)})

    try:
        written = _each_row(rows, handle, notes, progress)
    finally:
        files = writer.close()
    return notes.report(written, files)


def _edit_row(row: object, image_root: Path) -> dict:
    if not isinstance(row, dict):
        raise _Drop(DropReason.MALFORMED_ROW, "a row must be a JSON object")
    images, steps = row.get("images"), row.get("instructions")
    if not isinstance(images, list) or not all(isinstance(name, str) and name for name in images):
        raise _Drop(DropReason.MALFORMED_ROW, "'images' must be a list of file names")
    if len(images) < 2:
        raise _Drop(DropReason.TOO_FEW_IMAGES, f"{len(images)} image(s); an edit chain needs at least 2")
    if not isinstance(steps, list):
        raise _Drop(DropReason.MALFORMED_ROW, "'instructions' must be a list with one entry per edit step")
    # A lone string is accepted as the only phrasing of its step.
    steps = [[step] if isinstance(step, str) else step for step in steps]
    if not all(isinstance(step, list) and step and all(isinstance(t, str) and t for t in step) for step in steps):
        raise _Drop(DropReason.MALFORMED_ROW, "each instruction step must be a non-empty list of strings")
    if len(steps) != len(images) - 1:
        raise _Drop(DropReason.LISTS_DISAGREE, f"{len(images)} images need {len(images) - 1} steps, got {len(steps)}")
    return {"image_list": [_image_bytes(image_root / name) for name in images], "instruction_list": steps}


def write_parquet_info(out_dir: Path, files: tuple[Path, ...]) -> Path:
    """`parquet_info.json` for `files`, keyed by name relative to `out_dir`, read back with pyarrow."""
    info = {}
    for path in files:
        meta = pq.read_metadata(path)
        info[path.relative_to(out_dir).as_posix()] = {"num_row_groups": meta.num_row_groups, "num_rows": meta.num_rows}
    target = out_dir / "parquet_info.json"
    target.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return target


def prepare_edit(
    manifest_jsonl: str | Path,
    out_dir: str | Path,
    *,
    rows_per_group: int = 16,
    rows_per_shard: int = 1024,
    image_root: str | Path | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> PrepareReport:
    """Write edit parquet shards and `parquet_info.json` from a JSONL manifest.

    Each row is `{"images": [path, ...], "instructions": [[phrasing, ...], ...]}` with one
    instruction step per consecutive image pair. Paths are relative to `image_root`, by
    default the manifest's folder. Row groups are the edit family's sharding unit, so
    small groups spread a dataset over more workers.
    """
    manifest, notes = Path(manifest_jsonl), _Notes()
    if not manifest.is_file():
        raise ConfigError("manifest_jsonl", str(manifest), "the file does not exist")
    root = Path(image_root or manifest.parent)
    rows = _manifest_rows(manifest)
    out = _prepare_out_dir(Path(out_dir), overwrite)
    writer = _ShardWriter(out, EDIT_SCHEMA, rows_per_group, rows_per_shard)
    try:
        written = _each_row(rows, lambda _, row: writer.add(_edit_row(row, root)), notes, progress)
    finally:
        files = writer.close()
    return notes.report(written, (*files, write_parquet_info(out, files)))


# -- VLM ---------------------------------------------------------------------------------
def _vlm_rows(source: Path) -> Rows:
    """The rows of a LLaVA-style JSON list (located by index) or a JSONL file (by line)."""
    with source.open(encoding="utf-8-sig") as handle:
        first = next((char for line in handle for char in line if not char.isspace()), "")
    if first != "[":
        return _manifest_rows(source)
    try:
        rows = json.loads(source.read_text(encoding="utf-8-sig"))
    except ValueError as exc:
        raise ConfigError("source", str(source), f"looks like a JSON list but does not parse: {exc}") from None
    return [(f"{source.name}[{index}]", row) for index, row in enumerate(rows)]


def _rename_roles(row: dict, fix: Callable[[Fix, str], None]) -> None:
    turns = row.get("conversations")
    if not isinstance(turns, list):
        return
    renamed = [
        {**turn, "from": _ROLE_NAMES[turn["from"]]} if isinstance(turn, dict) and turn.get("from") in _ROLE_NAMES
        else turn
        for turn in turns
    ]
    changed = sum(new is not old for new, old in zip(renamed, turns))
    if changed:
        row["conversations"] = renamed
        fix(Fix.ROLES_RENAMED, f"{changed} turn(s) from user/assistant to human/gpt")


def _prepend_tag(turns: list[dict], tag: str) -> bool:
    for index, turn in enumerate(turns):
        if turn["from"] == "human":
            turns[index] = {**turn, "value": f"{tag}\n{turn['value']}"}
            return True
    return False


def _fix_vlm_row(row: object, image_root: Path, fix: Callable[[Fix, str], None]) -> dict:
    """The row as the SFT reader wants it, reporting each repair; raises `_Drop` otherwise."""
    if not isinstance(row, dict):
        raise _Drop(DropReason.MALFORMED_ROW, "a row must be a JSON object")
    row = dict(row)
    _rename_roles(row, fix)
    problem = check_conversations(row)
    if problem:
        raise _Drop(DropReason.MALFORMED_ROW, problem)
    turns = row["conversations"] = list(row["conversations"])
    if not any(turn["from"] == "gpt" and turn["value"].strip() for turn in turns):
        raise _Drop(DropReason.NO_ANSWER, "no gpt turn with text: nothing to train on")
    image, video = row.get("image"), row.get("video")
    if image is not None and video is not None:
        raise _Drop(DropReason.MALFORMED_ROW, "a row holds 'image' or 'video', not both")
    if video is not None:
        _check_video_row(turns, image_root, video, fix)
        return row
    names = [image] if isinstance(image, str) else list(image or [])
    missing = [name for name in names if not (image_root / name).is_file()]
    if missing:
        raise _Drop(DropReason.IMAGE_MISSING, f"not under {image_root}: {', '.join(missing[:3])}")
    tags = count_image_tags(turns)
    if tags != len(names):
        if not (tags == 0 and len(names) == 1 and _prepend_tag(turns, IMAGE_TAG)):
            raise _Drop(DropReason.PLACEHOLDER_MISMATCH, f"{tags} <image> placeholder(s) for {len(names)} image(s)")
        fix(Fix.IMAGE_TAG_ADDED, "prepended <image> to the first human turn")
    return row


def _check_video_row(turns: list[dict], image_root: Path, video: str, fix: Callable[[Fix, str], None]) -> None:
    path = image_root / video
    if not (path.is_dir() if video.endswith("/") else path.is_file()):
        raise _Drop(DropReason.VIDEO_MISSING, f"{path} does not exist")
    # The reader turns one <video> into one <image> per frame; any other tag breaks the count.
    video_tags = sum(turn["value"].count(VIDEO_TAG) for turn in turns if turn["from"] == "human")
    if count_image_tags(turns) or video_tags > 1:
        raise _Drop(DropReason.PLACEHOLDER_MISMATCH, "a video row needs exactly one <video> and no <image>")
    if video_tags == 0:
        if not _prepend_tag(turns, VIDEO_TAG):
            raise _Drop(DropReason.PLACEHOLDER_MISMATCH, "a video row needs a human turn to hold <video>")
        fix(Fix.VIDEO_TAG_ADDED, "prepended <video> to the first human turn")


def prepare_vlm(
    source: str | Path, out_jsonl: str | Path, *, image_root: str | Path, progress: Progress | None = None
) -> PrepareReport:
    """Write SFT JSONL from LLaVA-style JSON (a list) or JSONL, checked against `image_root`.

    Repairs (each reported): user/assistant roles become human/gpt; a single image without
    `<image>` gets one prepended to the first human turn (likewise `<video>`). Drops (each
    reported): unparsable or malformed rows, missing media, placeholder counts that cannot
    be repaired, rows without a gpt answer. Other keys of a row are kept as they are.
    """
    source, out, root, notes = Path(source), Path(out_jsonl), Path(image_root), _Notes()
    if not root.is_dir():
        raise ConfigError("image_root", str(root), "not a folder")
    if not source.is_file():
        raise ConfigError("source", str(source), "the file does not exist")
    rows = _vlm_rows(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:

        def write(location: str, row: object) -> None:
            fixes: list[RowNote] = []  # kept only if the row is
            fixed = _fix_vlm_row(row, root, lambda kind, detail: fixes.append(RowNote(location, kind.value, detail)))
            handle.write(json.dumps(fixed, ensure_ascii=False) + "\n")
            notes.fixed.extend(fixes)

        written = _each_row(rows, write, notes, progress)
    return notes.report(written, (out,))
