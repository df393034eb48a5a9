"""A family's reads (families/reads.py): the bytes its read-ahead holds come back to 0, the
columns a reader asks for are the columns it gets, and a resumed buffer with one unreadable
row group rebuilds the others exactly and counts that one's rows, as inline reads do."""

from __future__ import annotations

import itertools
import pickle

import pyarrow as pa
import pyarrow.parquet as pq

from bagel_bench.slow_reads import delayed_storage, row_group_bytes
from bagel_data import ImageTransform, T2IIterableDataset
from bagel_data.families.reads import FamilyReads, ParquetSource
from bagel_data.families.walk import walk
from helpers.noise_t2i import write_noise_t2i

ON = 1 << 20


def _family(folder, tokenizer) -> T2IIterableDataset:
    return T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(folder)], [3], num_workers=1)


def test_the_bytes_held_come_back_to_zero_when_a_stream_stops_midway(tmp_path, tokenizer):
    write_noise_t2i(tmp_path)
    family = _family(tmp_path, tokenizer)
    stream = family.iter_samples(read_ahead=ON)
    list(itertools.islice(stream, 5))  # mid-file: row groups fetched ahead and not yet taken
    assert family.read_ahead_stats()["held_bytes"] > 0
    stream.close()
    stats = family.read_ahead_stats()
    assert stats["held_bytes"] == 0 and stats["hits"] > 0, stats


def test_the_bytes_of_a_resumed_buffer_are_let_go_once_its_rows_are_rebuilt(tmp_path, tokenizer):
    write_noise_t2i(tmp_path)
    cursors = [(0, unit, group, row) for unit in range(3) for group, row in ((0, 0), (0, 2), (2, 1))]
    family = _family(tmp_path, tokenizer)
    family.prefetch_rows(cursors, ON)
    for cursor in cursors:
        assert family.sample_at(cursor) is not None
    stats = family.read_ahead_stats()
    assert stats["held_bytes"] == 0 and stats["misses"] == 0, stats  # released at each row's last take
    family.stop_read_ahead()


def test_the_columns_asked_for_are_the_columns_returned(tmp_path):
    path = str(tmp_path / "part.parquet")
    table = pa.table({"id": list(range(12)), "text": [f"row {i}" for i in range(12)], "extra": [1.5] * 12})
    pq.write_table(table, path, row_group_size=4)
    shard = type("Shard", (), {})()
    reads = FamilyReads()
    source = ParquetSource(lambda unit_id, row_start: (path, 0, None), lambda names: ("id", "text"))
    shard.unit_ids, shard.global_worker = [0], (0, 1)
    stop = reads.follow(ON, source, walk(shard, None, 0, None))
    try:
        with reads.open_parquet(path) as reader:
            fetched = reader.read_row_group(0, ["id", "text"])  # as fetched ahead
            fewer = reader.read_row_group(1, ["text"])  # fetched with two columns: read again
            more = reader.read_row_group(2, ["id", "text", "extra"])
    finally:
        stop()
    assert fetched.column_names == ["id", "text"] and fewer.column_names == ["text"]
    assert more.column_names == ["id", "text", "extra"]
    assert fewer.column("text").to_pylist() == [f"row {i}" for i in range(4, 8)]
    assert more.equals(table.slice(8, 4))
    assert reads.stats()["held_bytes"] == 0


def test_one_unreadable_row_group_among_buffered_rows(tmp_path, tokenizer):
    paths = write_noise_t2i(tmp_path)
    broken = {paths[1]: row_group_bytes(paths[1], 1)}  # the middle file's second row group
    unit = [str(path) for path in _family(tmp_path, tokenizer).epoch_units].index(str(paths[1]))
    cursors = [(0, u, group, row) for u in range(3) for group, row in ((0, 1), (1, 0), (1, 1), (2, 2))]
    runs = {}
    for budget in (0, ON):
        family = _family(tmp_path, tokenizer)
        log = family.new_skip_log()
        with delayed_storage(fail=broken):
            family.prefetch_rows(cursors, budget)
            runs[budget] = [family.sample_at(cursor, log=log) for cursor in cursors], dict(log.counts)
        family.stop_read_ahead()
    (inline, inline_skips), (ahead, ahead_skips) = runs[0], runs[ON]
    lost = [cursor for cursor, sample in zip(cursors, ahead) if sample is None]
    assert lost == [(0, unit, 1, 0), (0, unit, 1, 1)]
    assert (
        ahead_skips == inline_skips and inline_skips.get("row_group_unreadable") == 4
    )  # each lost row counts its group of 2
    assert pickle.dumps([s["row_key"] for s in ahead if s]) == pickle.dumps([s["row_key"] for s in inline if s])
    for want, have in zip(inline, ahead):
        if want is not None:
            assert all((a == b).all() for a, b in zip(want["image_tensor_list"], have["image_tensor_list"]))
            assert want["text_ids_list"] == have["text_ids_list"]
