"""`OpenedParquet`: one open and one footer read per file; row groups read in parallel from
Arrow's own files (S3, GCS, HDFS, local) share that handle, while a Python file object (one
cursor) gives each parallel read a handle of its own. Either way the tables are the file's."""

from __future__ import annotations

import collections
import concurrent.futures

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from bagel_data.sources import parquet_ahead, storage


@pytest.fixture()
def shard(tmp_path) -> str:
    path = str(tmp_path / "part.parquet")
    table = pa.table({"id": list(range(40)), "text": [f"row {i} " * 20 for i in range(40)]})
    pq.write_table(table, path, row_group_size=5)  # 8 row groups
    return path


@pytest.mark.parametrize(("kind", "opens_for_eight_reads"), [("native", 1), ("python", 1 + 8)])
def test_parallel_row_group_reads_share_a_native_handle(shard, monkeypatch, kind, opens_for_eight_reads):
    opens: collections.Counter = collections.Counter()

    def open_input(path):
        opens[path] += 1
        return pafs.LocalFileSystem().open_input_file(path) if kind == "native" else open(path, "rb")

    monkeypatch.setattr(storage, "open_input", open_input)
    opened = parquet_ahead.OpenedParquet(shard)
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            reads = list(pool.map(lambda i: opened.read_row_group(i, ("id", "text"), True), range(8)))
    finally:
        opened.close()
    assert opens[shard] == opens_for_eight_reads
    whole = pq.read_table(shard)
    assert [columns for columns, _ in reads] == [("id", "text")] * 8
    assert pa.concat_tables([table for _, table in reads]).equals(whole)
