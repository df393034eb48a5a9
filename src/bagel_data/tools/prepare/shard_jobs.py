"""One shard of a sharded preparation, as a pure function: `convert_shard` turns a batch of
input rows into one file's bytes and its drop notes. The engines (`engine.py` locally,
`ray_engine.py` on Ray Data) map it; neither needs the other.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import json
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from .common import SOURCE_KEY, Rows
from .report import RowDropped, RowNote, report_name

# (location, row) -> (output row, repairs made to it); raises `RowDropped` for a row to leave out.
# An output row may name where its text came from under `SOURCE_KEY` (taken out, counted).
Convert = Callable[[str, object], tuple[dict, list[RowNote]]]


@dataclasses.dataclass(frozen=True)
class ShardJob:
    """What every shard of one preparation needs; picklable, so it travels to Ray workers."""

    convert: Convert
    encode: Callable[[list[dict]], bytes]  # the shard's output rows -> the file's bytes
    suffix: str  # ".parquet" or ".jsonl"
    fingerprint: dict  # what a restart must match to reuse finished shards


@dataclasses.dataclass(frozen=True)
class ShardResult:
    index: int
    data: bytes | None  # None when every row of the shard was dropped
    rows_written: int
    dropped: tuple[RowNote, ...]
    fixed: tuple[RowNote, ...]
    sources: tuple[tuple[str, int], ...] = ()  # (where the text came from, rows), first seen first


def convert_shard(rows: Rows, index: int, job: ShardJob) -> ShardResult:
    """Shard `index`: every row through `job.convert`, the kept ones encoded as one file."""
    kept: list[dict] = []
    dropped: list[RowNote] = []
    fixed: list[RowNote] = []
    sources: collections.Counter[str] = collections.Counter()
    for location, row in rows:
        try:
            if isinstance(row, RowDropped):
                raise row
            record, fixes = job.convert(location, row)
        except RowDropped as bad:
            dropped.append(RowNote(location, report_name(bad.reason), bad.detail))
            continue
        if (source := record.pop(SOURCE_KEY, None)) is not None:
            sources[source] += 1
        kept.append(record)
        fixed.extend(fixes)
    data = job.encode(kept) if kept else None
    return ShardResult(index, data, len(kept), tuple(dropped), tuple(fixed), tuple(sources.items()))


def parquet_bytes(schema: pa.Schema, rows_per_group: int, rows: list[dict]) -> bytes:
    """One parquet file of `rows` in row groups of `rows_per_group` (the last one shorter)."""
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, schema) as writer:
        for start in range(0, len(rows), rows_per_group):
            group = rows[start : start + rows_per_group]
            writer.write_table(pa.Table.from_pylist(group, schema=schema), row_group_size=len(group))
    return sink.getvalue()


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")


def map_local(job: ShardJob, shards: list[tuple[int, Rows]]) -> Iterator[ShardResult]:
    for index, rows in shards:
        yield convert_shard(rows, index, job)
