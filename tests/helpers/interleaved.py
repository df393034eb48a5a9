"""Small interleaved-document sets: parquet shards (one row group per list) and JSONL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bagel_data.families.interleaved import INTERLEAVED_SCHEMA


def write_interleaved(path, row_groups: Sequence[Sequence[list]]) -> str:
    """One parquet file, one row group per entry; a row is a document's list of segments."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(str(path), INTERLEAVED_SCHEMA) as writer:
        for group in row_groups:
            table = pa.Table.from_pylist([{"segments": doc} for doc in group], schema=INTERLEAVED_SCHEMA)
            writer.write_table(table, row_group_size=max(len(group), 1))
    return str(path)


def write_interleaved_jsonl(path, docs: Sequence[list]) -> str:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(json.dumps({"segments": doc}) + "\n" for doc in docs), encoding="utf-8")
    return str(path)
