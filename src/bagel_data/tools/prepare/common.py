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
from collections.abc import Callable
from pathlib import Path

from ...errors import ConfigError, SkipReason
from ...sources.captions import (  # noqa: F401 - re-exported: the rules prepare shares with the readers
    CAPTION_KEYS,
    caption_values,
    numbered_caption_keys,
    numbered_captions,
    sidecar_captions,
)
from ...sources.tar_members import IMAGE_SUFFIXES  # noqa: F401 - re-exported
from .report import Notes, RowDropped, RowNote, report_name

Progress = Callable[[int, int], None]  # (rows done, rows in total)

ROLE_NAMES = {"user": "human", "assistant": "gpt"}
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
