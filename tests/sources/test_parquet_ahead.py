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


def test_a_plans_row_group_tasks_start_at_its_first_and_are_estimated_from_the_footer(shard):
    import weakref

    registry: weakref.WeakSet = weakref.WeakSet()
    plan = parquet_ahead.file_tasks(shard, 2, 4, lambda names: ["id"], registry)
    footer = next(plan)
    opened = parquet_ahead.OpenedParquet(shard)
    footer.future = concurrent.futures.Future()
    footer.future.set_result(opened)
    try:
        tasks = list(plan)
        assert [task.key for task in tasks] == [("rg", shard, 2), ("rg", shard, 3)]
        assert [task.estimate for task in tasks] == [opened.metadata.row_group(i).total_byte_size for i in (2, 3)]
    finally:
        opened.close()


def test_a_row_group_fetched_with_other_columns_is_read_again_with_the_asked_ones(shard):
    import time
    import weakref

    from bagel_data.sources.read_ahead import ReadAhead

    registry: weakref.WeakSet = weakref.WeakSet()
    ahead = ReadAhead(budget_bytes=1 << 20)
    ahead.follow(parquet_ahead.file_tasks(shard, 0, None, lambda names: ["id"], registry))
    try:
        reader = parquet_ahead.open_ahead(shard, ahead, registry)
        deadline = time.monotonic() + 10
        while ahead.stats()["fetched_bytes"] == 0 or not any(t.key[0] == "rg" for t in ahead._queue):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert reader.read_row_group(0, ["id", "text"]).column_names == ["id", "text"]
    finally:
        ahead.close()
        parquet_ahead.close_all(registry)


def test_a_pinned_footer_answers_every_row_that_asks_for_it(shard):
    import weakref

    from bagel_data.sources.read_ahead import ReadAhead

    registry: weakref.WeakSet = weakref.WeakSet()
    ahead = ReadAhead(budget_bytes=1 << 20)
    parquet_ahead.pin_file(ahead, shard, {0: 2, 3: 1}, lambda names: ["id"], registry)
    try:
        for _ in range(3):  # three buffered rows: each opens the file
            assert parquet_ahead.open_ahead(shard, ahead, registry, stream=False).num_row_groups == 8
        assert ahead.stats()["misses"] == 0
    finally:
        ahead.close()
        parquet_ahead.close_all(registry)


def test_a_unit_ending_past_the_files_row_groups_lets_the_plan_go_on(shard):
    import weakref

    from bagel_data.sources.read_ahead import Task

    registry: weakref.WeakSet = weakref.WeakSet()
    footer = parquet_ahead.footer_task(shard, registry)
    footer.future = concurrent.futures.Future()
    footer.future.set_result(parquet_ahead.OpenedParquet(shard))

    def plan():  # a family's plan walks its units' files one after another
        yield from parquet_ahead.file_tasks(shard, 6, 99, lambda names: ["id"], registry, footer)
        yield Task("next file", lambda: None, 1)

    try:
        assert [task.key for task in plan()][1:] == [("rg", shard, 6), ("rg", shard, 7), "next file"]
    finally:
        parquet_ahead.close_all(registry)
