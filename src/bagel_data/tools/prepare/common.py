"""The row loop every prepare format shares: `manifest_rows` reads a manifest, `each_row`
runs a row handler that raises `RowDropped` for a bad row and records it, and
`caption_values` reads captions; with the names the formats share.

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
from .report import Notes, RowDropped, RowNote, report_name

Progress = Callable[[int, int], None]  # (rows done, rows in total)

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
ROLE_NAMES = {"user": "human", "assistant": "gpt"}
CAPTION_COLUMN = re.compile(r"caption_(\d+)$")

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


def manifest_rows(manifest: Path) -> Rows:
    """The rows of a CSV or JSONL manifest, located by file name and line number."""
    rows: Rows = []
    if manifest.suffix.lower() == ".csv":
        # utf-8-sig: spreadsheet exports often start with a byte-order mark. Bytes that are
        # not UTF-8 are kept as surrogates, so only their row is dropped.
        with manifest.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
            reader = csv.DictReader(handle)
            if "path" not in (reader.fieldnames or []):
                raise ConfigError("manifest", str(manifest), "a CSV manifest needs a 'path' column")
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
