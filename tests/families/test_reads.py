"""A family's reads (families/reads.py): the bytes its read-ahead holds come back to 0, the
columns a reader asks for are the columns it gets, and a resumed buffer with one unreadable
row group rebuilds the others exactly and counts that one's rows, as inline reads do."""

from __future__ import annotations

import itertools
import pickle
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq

from bagel_bench.slow_reads import delayed_storage, row_group_bytes
from bagel_data import ImageTransform, T2IIterableDataset
from bagel_data.families.reads import FILES_AHEAD, FamilyReads, ParquetSource
from bagel_data.families.walk import Phase, WorkItem, walk
from bagel_data.instruments import attached
from helpers.builders import write_t2i
from helpers.noise_t2i import noise_row, write_noise_t2i

ON = 1 << 20


def _family(folder, tokenizer) -> T2IIterableDataset:
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(folder)], [3], num_workers=1)
    family.units.walk_by_rows = False  # cursors below name (pass, file, row group, row): the walk by units
    return family


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


def _one_row_group_files(folder, count: int, rows: int = 4) -> list[str]:
    paths = []
    for index in range(count):
        path = str(folder / f"part-{index:03d}.parquet")
        pq.write_table(pa.table({"id": [index * 100 + row for row in range(rows)]}), path)
        paths.append(path)
    return paths


def _shard(units: int):
    shard = type("Shard", (), {})()
    shard.unit_ids, shard.global_worker = list(range(units)), (0, 1)
    return shard


def test_the_next_files_open_while_a_footer_is_awaited(tmp_path):
    """Reading ahead crosses files: while the first file's footer is awaited (its open is
    held here), the walk's next files are opened; then each is read once, all hits."""
    paths = _one_row_group_files(tmp_path, 6)
    gate, opened, lock = threading.Event(), [], threading.Lock()

    def held(call, args, kwargs):
        with lock:
            opened.append(args[0])
        if args[0] == paths[0]:
            gate.wait(10)
        return call(*args, **kwargs)

    reads = FamilyReads()
    source = ParquetSource(lambda unit_id, row_start: (paths[unit_id], 0, None), lambda names: ("id",))
    one_pass = [Phase(0, True, iter([WorkItem(unit, unit, 0, (0, 0)) for unit in range(len(paths))]))]
    with attached({"open": held}):
        stop = reads.follow(ON, source, one_pass)
        try:
            deadline = time.monotonic() + 10
            while paths[1] not in opened and time.monotonic() < deadline:
                time.sleep(0.01)
            assert paths[1] in opened and not gate.is_set()  # opened while file 0 waits
            gate.set()
            for index, path in enumerate(paths):  # the stream, in the walk's order
                with reads.open_parquet(path) as reader:
                    assert reader.read_row_group(0, ["id"]).column("id").to_pylist()[0] == index * 100
        finally:
            gate.set()
            stop()
    stats = reads.stats()
    assert stats["misses"] == 0 and stats["hits"] == 2 * len(paths), stats  # a footer and a row group each
    assert sorted(opened) == sorted(paths * 2)  # each file: its footer once, a row group handle


def test_the_files_opened_early_are_the_walks_next(tmp_path):
    """Once the stream is under way, a held footer lets up to FILES_AHEAD next files open:
    the walk's next ones, in its order, never one it passed."""
    paths = _one_row_group_files(tmp_path, FILES_AHEAD + 8)
    hold, gate, opened, lock = paths[4], threading.Event(), [], threading.Lock()

    def held(call, args, kwargs):
        with lock:
            opened.append(args[0])
        if args[0] == hold:
            gate.wait(10)
        return call(*args, **kwargs)

    reads = FamilyReads()
    source = ParquetSource(lambda unit_id, row_start: (paths[unit_id], 0, None), lambda names: ("id",))
    with attached({"open": held}):
        stop = reads.follow(ON, source, walk(_shard(len(paths)), None, 0, None))
        try:
            for path in paths[:4]:
                with reads.open_parquet(path) as reader:
                    reader.read_row_group(0, ["id"])
            time.sleep(0.5)  # what would open while file 4's footer is held
            with lock:
                early = {paths.index(path) for path in opened} - set(range(5))
            assert early and max(early) <= 4 + FILES_AHEAD, early
            assert early == set(range(5, 5 + len(early))), early  # the next ones, in order
        finally:
            gate.set()
            stop()


def test_resume_at_a_file_boundary_with_read_ahead_is_exact(tmp_path, tokenizer):
    """A cursor on a file's last row: the resumed stream, read ahead across the following
    files, gives the uninterrupted stream's samples, every read foreseen by its plan."""
    rows = iter(range(100))
    write_t2i(tmp_path, [[[noise_row(next(rows)) for _ in range(2)]] for _ in range(6)])

    def family() -> T2IIterableDataset:
        family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(tmp_path)], [6], num_workers=1)
        family.units.walk_by_rows = False  # a cursor at a file's end: the walk by units
        return family

    straight = list(itertools.islice(family().iter_samples(read_ahead=0), 14))
    first = family()
    stream = first.iter_samples(read_ahead=ON)
    taken = list(itertools.islice(stream, 6))
    stream.close()
    cursor = taken[-1][0]
    assert cursor[-1] == 1 and cursor[-2] == 0  # the last row of a file's only row group
    resumed_family = family()
    resumed = list(itertools.islice(resumed_family.iter_samples(after=cursor, read_ahead=ON), 8))
    stats = resumed_family.read_ahead_stats()
    assert [c for c, _ in resumed] == [c for c, _ in straight[6:]]
    for (_, want), (_, have) in zip(straight[6:], resumed):
        assert want["text_ids_list"] == have["text_ids_list"]
        assert all((a == b).all() for a, b in zip(want["image_tensor_list"], have["image_tensor_list"]))
    assert stats["misses"] == 0, stats


# -- the sources and the walk's look-ahead, without threads ----------------------------------
def test_a_single_row_s_unit_reads_ahead_its_row_group_alone(monkeypatch):
    """An inherited row (`single`) fetches its own row group; a unit from a row on, the rest
    of its span."""
    from bagel_data.families import reads

    asked = []
    monkeypatch.setattr(reads.parquet_ahead, "file_tasks", lambda path, first, stop, *rest: asked.append((first, stop)))
    source = ParquetSource(lambda unit_id, row_start: ("f.parquet", 2, 5), lambda names: ("id",))
    source.unit_tasks(0, (2, 0), True, set())
    source.unit_tasks(0, (2, 0), False, set())
    assert asked == [(2, 3), (2, 5)]


def test_a_file_whose_footer_was_started_is_not_asked_to_open_again(monkeypatch):
    import types

    from bagel_data.families import reads

    footers = {}
    monkeypatch.setattr(
        reads.parquet_ahead,
        "footer_task",
        lambda path, files: footers.setdefault(path, types.SimpleNamespace(future=None)),
    )
    source = ParquetSource(lambda unit_id, row_start: (f"{unit_id}.parquet", 0, None), lambda names: ("id",))
    items = [WorkItem(0, 0, 0, ()), WorkItem(1, 1, 0, ())]
    assert len(list(source.openings(items, set()))) == 2
    footers["0.parquet"].future = "started"
    assert [early.task for early in source.openings(items, set())] == [footers["1.parquet"]]


def test_a_row_buffered_twice_is_pinned_for_two_rebuilds():
    from bagel_data.families.reads import RowSource

    pinned = {}

    class Ahead:
        def pin(self, task, wanted):
            pinned.update({key: count for key, (_, count) in wanted.items()})

    RowSource(lambda unit_id: f"line-{unit_id}", lambda key: key, 10).pin(Ahead(), [(3, 0), (5, 1), (3, 2)], set())
    assert pinned == {("row", "line-3"): 2, ("row", "line-5"): 1}


def test_the_walk_s_look_ahead_reaches_into_the_next_phase_and_no_further():
    from bagel_data.families.reads import _Walked

    def phase(number, units):
        return Phase(number, True, iter([WorkItem(k, unit, number, ()) for k, unit in enumerate(units)]))

    walked = _Walked([phase(0, [1, 2]), phase(1, [3, 4]), phase(2, [5])])
    assert [item.unit_id for item in walked.upcoming(10)] == [1, 2, 3, 4]
    assert [item.unit_id for item in walked.upcoming(3)] == [1, 2, 3]


def test_a_resumed_phase_with_nothing_left_does_not_stop_the_read_ahead():
    """Only a whole pass with no unit ends the plan (an empty worker); a phase resumed at its
    end goes on to the next."""
    from bagel_data.families.reads import source_tasks

    class Units:
        def unit_tasks(self, unit_id, row_start, single, files):
            yield ("task", unit_id)

        def pin(self, ahead, row_keys, files):
            pass

    def phases(first_whole: bool):
        return [Phase(0, first_whole, iter(())), Phase(1, True, iter([WorkItem(0, 7, 1, ())]))]

    assert list(source_tasks(Units(), phases(False), set())) == [("task", 7)]
    assert list(source_tasks(Units(), phases(True), set())) == []


def test_kept_values_keep_the_last_used_keys_up_to_the_limit():
    reads, made = FamilyReads(), []

    def keep(key):
        return reads.kept(key, lambda: made.append(key) or key.upper(), limit=2)

    assert [keep("a"), keep("b"), keep("a")] == ["A", "B", "A"] and made == ["a", "b"]
    keep("c")  # evicts b, the least recently used
    keep("a")
    assert made == ["a", "b", "c"]
    keep("b")
    assert made == ["a", "b", "c", "b"]


def test_a_new_budget_starts_a_new_read_ahead_and_an_old_stream_leaves_a_newer_one_running():
    reads = FamilyReads()
    try:
        first = reads.start(ON)
        assert reads.start(ON) is first
        second = reads.start(2 * ON)
        assert second is not first and second.budget == 2 * ON and first.closed
        stop_old = reads.follow(2 * ON, None, [])
        stop_new = reads.follow(2 * ON, None, [])
        stop_old()
        assert not reads.active().closed  # type: ignore[union-attr]
        stop_new()
        assert reads.active().closed  # type: ignore[union-attr]
    finally:
        reads.stop()
