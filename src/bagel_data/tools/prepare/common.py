"""The row loop every prepare format shares: `manifest_rows` reads a manifest, `each_row`
runs a row handler that raises `RowDropped` for a bad row and records it, and
`sidecar_captions` reads the `.txt`/`.json` captions beside an image (folder and tar alike);
with the names the formats share.

The report is `report.py`, the stored image bytes `stored_images.py`, the parquet shards
`shards.py`.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from pathlib import Path

from ...errors import ConfigError, SkipReason
from .report import DropReason, Notes, RowDropped, RowNote, report_name

Progress = Callable[[int, int], None]  # (rows done, rows in total)

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
ROLE_NAMES = {"user": "human", "assistant": "gpt"}
CAPTION_COLUMN = re.compile(r"caption_(\d+)$")
# The keys of a sidecar `.json` object that hold captions, in the order they are tried; the
# first one holding text is used and every other key is ignored: img2dataset's `.json` also
# holds `url`, `status`, `width`..., and a user's may hold tags or labels that are not
# captions. `caption` takes its numbered siblings `caption_1`, `caption_2`, ... with it.
CAPTION_KEYS = ("caption", "captions", "text", "prompt", "alt_text", "description")
BINARY_TABLE_SUFFIXES = (".parquet", ".arrow")
SOURCE_KEY = "_source"  # in an output row: where its text came from, counted in the report

Rows = list[tuple[str, object]]  # (location, row); a row that already failed is a `RowDropped`


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


def manifest_rows(manifest: Path, required_column: str | None = "path") -> Rows:
    """The rows of a CSV or JSONL manifest, located by file name and line number; a CSV
    manifest must have `required_column`."""
    rows: Rows = []
    if manifest.suffix.lower() in BINARY_TABLE_SUFFIXES:  # its bytes as JSON lines: thousands of bogus rows
        raise ConfigError(
            "manifest", str(manifest), "a parquet file is a table, not a manifest; this command takes CSV or JSONL"
        )
    if manifest.suffix.lower() == ".csv":
        # utf-8-sig: spreadsheet exports often start with a byte-order mark. Bytes that are
        # not UTF-8 are kept as surrogates, so only their row is dropped.
        with manifest.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
            reader = csv.DictReader(handle)
            if required_column is not None and required_column not in (reader.fieldnames or []):
                raise ConfigError("manifest", str(manifest), f"a CSV manifest needs a {required_column!r} column")
            for row in reader:
                location = f"{manifest.name}:{reader.line_num}"
                rows.append((location, _not_utf8(row) or row))
        return rows
    with manifest.open("rb") as handle:  # decoded line by line: one bad line drops one row
        for number, raw in enumerate(handle, 1):
            location = f"{manifest.name}:{number}"
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                if line.strip():
                    rows.append((location, json.loads(line)))
            except UnicodeDecodeError as exc:
                rows.append((location, RowDropped(SkipReason.JSON_INVALID, f"not UTF-8 (byte {exc.start})")))
            except ValueError as exc:
                rows.append((location, RowDropped(SkipReason.JSON_INVALID, f"not JSON: {str(exc)[:200]}")))
            except RecursionError:
                rows.append((location, RowDropped(SkipReason.JSON_INVALID, "JSON nested too deeply to read")))
    return rows


def _not_utf8(row: dict) -> RowDropped | None:
    """A RowDropped when a CSV row held bytes that are not UTF-8 (read as surrogates)."""
    for value in [*row.keys(), *row.values()]:
        values = value if isinstance(value, list) else [value]  # csv puts surplus cells in a list
        for text in values:
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    return RowDropped(SkipReason.JSON_INVALID, "the row is not UTF-8 text")
    return None


def caption_values(value: object) -> list[str]:
    """Captions from a sidecar/manifest value: a string, a list of strings or an object of them."""
    values = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else [value]
    texts = [text for text in values if isinstance(text, str)]
    if len(texts) != len(values):
        raise RowDropped(SkipReason.CAPTION_INVALID, "captions must be strings")
    return [text.strip() for text in texts if text.strip()]


def numbered_caption_keys(row: dict) -> list[tuple[int, str]]:
    """`(N, "caption_N")` for every `caption_N` key of `row`, by number."""
    return sorted((int(m.group(1)), key) for key in row if (m := CAPTION_COLUMN.match(str(key))))


def json_captions(meta: object) -> tuple[list[str], str]:
    """Captions from a parsed sidecar `.json`, and the key they came from (`CAPTION_KEYS`).

    A list or a string is captions as a whole; an object gives only its first caption key
    that holds text. A caption key holding something other than text is an error.
    """
    if not isinstance(meta, dict):
        return caption_values(meta), "list" if isinstance(meta, list) else "string"
    for key in CAPTION_KEYS:
        values = [meta.get(key)]
        if key == "caption":
            values += [meta[name] for _, name in numbered_caption_keys(meta)]
        try:
            texts = [text for value in values if value is not None for text in caption_values(value)]
        except RowDropped:
            raise RowDropped(SkipReason.CAPTION_INVALID, f"the .json's {key!r} is not text") from None
        if texts:
            return texts, key
    return [], ""


def sidecar_captions(txt: str | None, js: str | None) -> tuple[list[str], str]:
    """An image's captions from the text of its `.txt` (one per non-empty line) and `.json`
    sidecars (`json_captions`), and where they came from, e.g. `.txt + .json caption`.

    The folder and the tar layouts both read their captions here. A `.json` object without a
    caption key, and no `.txt` text, drops the row as `no_caption`, naming the keys it has.
    """
    captions: list[str] = []
    sources: list[str] = []
    if txt is not None:
        lines = [line.strip() for line in txt.splitlines() if line.strip()]
        if lines:
            captions += lines
            sources.append(".txt")
    if js is not None:
        try:
            meta = json.loads(js)
        except ValueError as exc:
            raise RowDropped(SkipReason.CAPTION_INVALID, f"the .json is not JSON: {exc}") from None
        texts, key = json_captions(meta)
        if texts:
            captions += texts
            sources.append(f".json {key}")
        elif not captions and isinstance(meta, dict):
            keys = ", ".join(sorted(map(str, meta))[:8]) or "none"
            raise RowDropped(
                DropReason.NO_CAPTION, f"the .json has no caption key ({', '.join(CAPTION_KEYS)}); its keys: {keys}"
            )
    return captions, " + ".join(sources)
