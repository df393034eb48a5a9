"""The read-ahead pool on its own: order, budget, errors, misses, pins and shutdown."""

from __future__ import annotations

import threading
import time

import pytest

from bagel_data.sources.read_ahead import MAX_AHEAD, PENDING, RAMP_START, Early, ReadAhead, Task, nbytes_of


def _tasks(sizes, log=None, gate=None):
    for index, size in enumerate(sizes):

        def fetch(i=index, n=size):
            if gate is not None:
                gate.wait(5)
            if log is not None:
                log.append(i)
            return b"x" * n

        yield Task(("unit", index), fetch, size)


def test_takes_come_back_in_order_with_their_values():
    ahead = ReadAhead(budget_bytes=1 << 20, threads=3)
    ahead.follow(_tasks([10, 20, 30, 40]))
    try:
        assert [len(ahead.take(("unit", i), lambda: b"")) for i in range(4)] == [10, 20, 30, 40]
    finally:
        ahead.close()  # joins the threads: every completion has been counted
    assert ahead.stats()["hits"] == 4 and ahead.stats()["misses"] == 0
    assert ahead.stats()["fetched_bytes"] == 100 and ahead.held == 0


def test_the_budget_bounds_what_is_fetched_ahead():
    fetched: list[int] = []
    ahead = ReadAhead(budget_bytes=250, threads=4, ramp_start=MAX_AHEAD)  # the budget, not the ramp, stops it
    ahead.follow(_tasks([100] * 10, fetched))
    try:
        _wait_for(lambda: len(fetched) >= 2)
        time.sleep(0.2)  # time for any overreach to show
        assert len(fetched) == 2 and ahead.held <= 250  # a third would pass the 250 bytes
        ahead.take(("unit", 0), lambda: b"")
        _wait_for(lambda: len(fetched) >= 3)
        time.sleep(0.2)
        assert len(fetched) == 3 and ahead.peak <= 250
    finally:
        ahead.close()


def _wait_for(condition, seconds: float = 10.0) -> None:
    """Threads on a busy machine may start late: wait for them, not a fixed time."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_one_unit_over_the_budget_still_reads():
    ahead = ReadAhead(budget_bytes=10, threads=2)
    ahead.follow(_tasks([100, 100]))
    try:
        assert len(ahead.take(("unit", 0), lambda: b"")) == 100
        assert len(ahead.take(("unit", 1), lambda: b"")) == 100
        assert ahead.stats()["misses"] == 0
    finally:
        ahead.close()


def test_an_error_is_raised_at_the_take_not_before():
    def plan():
        yield Task("good", lambda: b"ok", 2)
        yield Task("bad", lambda: (_ for _ in ()).throw(OSError("disk gone")), 2)
        yield Task("after", lambda: b"fine", 4)

    ahead = ReadAhead(budget_bytes=100)
    ahead.follow(plan())
    try:
        assert ahead.take("good", lambda: None) == b"ok"
        with pytest.raises(OSError, match="disk gone"):
            ahead.take("bad", lambda: None)
        assert ahead.take("after", lambda: None) == b"fine"
    finally:
        ahead.close()


def test_an_unforeseen_take_reads_inline_and_a_passed_task_is_dropped():
    ahead = ReadAhead(budget_bytes=1000)
    ahead.follow(_tasks([1, 2, 3]))
    try:
        assert ahead.take("elsewhere", lambda: "inline") == "inline"
        assert len(ahead.take(("unit", 2), lambda: b"")) == 3  # units 0 and 1 were passed
        assert ahead.take(("unit", 0), lambda: "again") == "again"
        assert ahead.stats()["misses"] == 2 and ahead.held == 0
    finally:
        ahead.close()


def _open_when(gate: threading.Event, condition) -> threading.Thread:
    """Open `gate` once `condition()` holds (or after 3 s, to let a failing test end)."""

    def wait_then_open():
        deadline = time.monotonic() + 3
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.005)
        gate.set()

    thread = threading.Thread(target=wait_then_open)
    thread.start()
    return thread


def test_passed_tasks_that_have_not_started_never_run():
    """The stream takes unit 3 while the one thread is held on unit 0: units 1 and 2 are
    passed before they start, and their reads are cancelled, not made for nothing."""
    gate, ran = threading.Event(), []
    tasks = list(_tasks([1, 1, 1, 1], ran, gate))
    for task in tasks:  # no estimate: queued at once, not one at a time until the first is back
        task.estimate = 0
    ahead = ReadAhead(budget_bytes=1000, threads=1, ramp_start=MAX_AHEAD)  # all four queued at once
    ahead.follow(iter(tasks))
    opener = _open_when(gate, lambda: tasks[1].future.cancelled() and tasks[2].future.cancelled())
    try:
        assert len(ahead.take(("unit", 3), lambda: b"")) == 1
    finally:
        opener.join()
        ahead.close()
    assert ran == [0, 3]


def test_close_cancels_a_pinned_read_that_has_not_started():
    gate, ran = threading.Event(), []
    ahead = ReadAhead(budget_bytes=1000, threads=1)
    ahead.follow(_tasks([1], ran, gate))  # holds the only thread until the gate opens
    pinned = Task("file", lambda: ran.append("pinned"), 0)
    ahead.pin(pinned, {"a": (lambda v: v, 1)})
    opener = _open_when(gate, lambda: pinned.future.cancelled())
    ahead.close()  # waits for unit 0, the running read
    opener.join()
    assert ran == [0]


def test_a_pending_plan_goes_on_when_its_dependency_completes():
    gate = threading.Event()
    first = Task("footer", lambda: gate.wait(5) and b"f", 1)

    def plan():
        yield first
        while first.future is None or not first.future.done():
            yield PENDING
        yield Task("row group", lambda: b"rg", 2)

    ahead = ReadAhead(budget_bytes=100)
    ahead.follow(plan())
    try:
        gate.set()
        assert ahead.take("footer", lambda: None) == b"f"
        _wait_for(lambda: ahead.stats()["fetched_bytes"] >= 3)
        assert ahead.take("row group", lambda: None) == b"rg" and ahead.stats()["misses"] == 0
    finally:
        ahead.close()


def test_pinned_values_answer_their_count_of_takes_then_miss():
    ahead = ReadAhead(budget_bytes=10)
    ahead.pin(Task("file", lambda: {"a": b"1", "b": OSError("bad group")}, 0), {
        "a": (lambda v: v["a"], 2),
        "b": (lambda v: (_ for _ in ()).throw(v["b"]), 1),
    })  # fmt: skip
    try:
        assert ahead.take("a", lambda: None, stream=False) == b"1"
        assert ahead.take("a", lambda: None, stream=False) == b"1"
        assert ahead.take("a", lambda: "inline", stream=False) == "inline"
        with pytest.raises(OSError, match="bad group"):
            ahead.take("b", lambda: None, stream=False)
        assert ahead.take("a", lambda: "stream", stream=True) == "stream"  # pins serve resumed rows only
    finally:
        ahead.close()


def test_close_stops_the_threads_and_later_takes_read_inline():
    gate = threading.Event()
    ahead = ReadAhead(budget_bytes=1000, threads=2)
    ahead.follow(_tasks([1] * 20, gate=gate))
    before = {t.name for t in threading.enumerate()}
    assert any(name.startswith("bagel-read-ahead") for name in before)
    gate.set()
    ahead.close()
    assert not any(t.name.startswith("bagel-read-ahead") and t.is_alive() for t in threading.enumerate())
    assert ahead.take(("unit", 5), lambda: "inline") == "inline" and ahead.held == 0


def test_a_failing_plan_only_stops_reading_ahead():
    def plan():
        yield Task("one", lambda: b"1", 1)
        raise KeyError("a family's own units")

    ahead = ReadAhead(budget_bytes=100)
    ahead.follow(plan())
    try:
        assert ahead.take("one", lambda: None) == b"1"
        assert ahead.take("two", lambda: "inline") == "inline"
    finally:
        ahead.close()


def test_nbytes_of_counts_what_a_value_holds():
    assert nbytes_of(b"abc") == 3
    assert nbytes_of((b"ab", {"x": b"cde", "y": ValueError()})) == 5
    assert nbytes_of(object()) == 0


def test_the_budget_holds_in_decoded_bytes_when_the_footer_understates_them(tmp_path):
    """A dictionary-encoded column (pyarrow's default) of one repeated image: each row group's
    footer size is about one image, its table 64 of them. The read-ahead learns that from the
    first one back and keeps what it holds under the budget."""
    import weakref

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bagel_data.sources import parquet_ahead

    image = bytes(range(256)) * 400  # 100 KB
    path = str(tmp_path / "dictionary.parquet")
    pq.write_table(pa.table({"image": pa.array([image] * 640, pa.binary())}), path, row_group_size=64)
    meta = pq.read_metadata(path)
    assert meta.row_group(0).total_byte_size * 10 < 64 * len(image)  # the understatement itself
    budget = 2 * 64 * len(image) + 64 * len(image) // 2  # room for 2 decoded row groups, not 3
    ahead = ReadAhead(budget, threads=4, ramp_start=MAX_AHEAD)  # the budget, not the ramp, is what stops it
    files: weakref.WeakSet = weakref.WeakSet()
    ahead.follow(parquet_ahead.file_tasks(path, 0, None, lambda names: ("image",), files))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (ahead._next is None or any(not t.future.done() for t in ahead._queue)):
        time.sleep(0.05)  # until it waits for room with everything it started back
    stats = ahead.stats()
    ahead.close()
    assert stats["peak_bytes"] <= budget, stats
    assert stats["fetched_bytes"] >= 2 * 64 * len(image)  # and it did read ahead that far
    assert ahead.stats()["held_bytes"] == 0


def test_a_kind_starts_one_task_until_one_comes_back_then_fills_the_budget():
    gate, ran = threading.Event(), []
    ahead = ReadAhead(budget_bytes=1000, threads=4, ramp_start=MAX_AHEAD)  # the budget alone decides
    ahead.follow(_tasks([10] * 6, ran, gate))
    try:
        time.sleep(0.2)
        assert sum(task.future is not None for task in ahead._queue) == 1  # its size unknown yet
        gate.set()
        _wait_for(lambda: len(ran) == 6)
        assert len(ran) == 6 and ahead.held == 60  # all six under the budget once it is known
    finally:
        ahead.close()


def _started(tasks) -> int:
    return sum(task.future is not None for task in tasks)


def test_it_starts_with_a_few_tasks_and_allows_one_more_per_take():
    """A worker's first reads are the stream's own: the read-ahead does not fill its budget
    at once (every worker and group of a node would, competing with the first pack)."""
    tasks = list(_tasks([0] * 40))  # no estimate: the budget never stops them
    ahead = ReadAhead(budget_bytes=1 << 30, threads=2)
    ahead.follow(iter(tasks))
    try:
        assert _started(tasks) == RAMP_START
        for taken in range(3):
            ahead.take(("unit", taken), lambda: b"")
            # `taken + 1` tasks taken, and the window is RAMP_START + taken + 1 beyond them
            assert _started(tasks) == 2 * (taken + 1) + RAMP_START
        assert ahead.hits == 3 and ahead.misses == 0
    finally:
        ahead.close()


def test_the_window_stops_growing_at_max_ahead():
    tasks = list(_tasks([0] * (2 * MAX_AHEAD + 10)))
    ahead = ReadAhead(budget_bytes=1 << 30, threads=2)
    ahead.follow(iter(tasks))
    try:
        for taken in range(MAX_AHEAD + 5):
            ahead.take(("unit", taken), lambda: b"")
        assert ahead.window == MAX_AHEAD
        assert _started(tasks) == MAX_AHEAD + 5 + MAX_AHEAD
    finally:
        ahead.close()


def test_an_early_task_starts_before_its_turn_and_runs_once():
    """A plan waiting on one result may start a later task early (a next file's footer);
    it runs once, and its value is taken at its own place in the order."""
    gate, ran = threading.Event(), []
    rest = list(_tasks([0, 0, 0], ran))[1:]
    blocked = Task(("unit", 0), lambda: (gate.wait(5), ran.append(0), b"")[-1], 0)
    later = rest[1]  # unit 2

    def plan():
        yield blocked
        yield Early(later)
        while not blocked.future.done():
            yield PENDING
        yield rest[0]
        yield later

    ahead = ReadAhead(budget_bytes=1 << 20, threads=2, ramp_start=4)
    ahead.follow(plan())
    try:
        _wait_for(lambda: 2 in ran)
        assert ran == [2]  # unit 2 ran while unit 0 was held
        gate.set()
        assert [ahead.take(("unit", i), lambda: b"inline") for i in range(3)] == [b"", b"", b""]
        assert sorted(ran) == [0, 1, 2] and ahead.misses == 0
    finally:
        ahead.close()
    assert ahead.held == 0


def test_an_early_hint_without_room_is_dropped_and_the_task_starts_at_its_turn():
    ran: list[int] = []
    tasks = list(_tasks([100, 100, 100], ran))
    for task in tasks:
        task.estimate = 0  # queued at once: only the budget decides
    tasks[2].estimate = 10_000  # over the budget: no room for it early

    def plan():
        yield tasks[0]
        yield Early(tasks[2])
        yield tasks[1]
        yield tasks[2]

    ahead = ReadAhead(budget_bytes=1000, threads=2, ramp_start=4)
    ahead.follow(plan())
    try:
        assert tasks[2] not in ahead._early
        assert [len(ahead.take(("unit", i), lambda: b"")) for i in range(3)] == [100, 100, 100]
        assert sorted(ran) == [0, 1, 2]
    finally:
        ahead.close()
    assert ahead.held == 0


def test_the_depth_follows_the_round_trip_over_the_stream_s_work():
    """Little's law: fetches of 100 ms for a stream working 10 ms on each want 11 in flight;
    none measured yet, or a local disk's quick fetches, keep the floor; the ceiling holds."""
    from bagel_data.sources.read_depth import Depth

    depth = Depth(floor=4, ceiling=32)
    assert depth.threads() == 4
    depth.fetched(0.1)
    assert depth.threads() == 4  # the stream's work is not known yet
    depth.work_s = 0.01
    assert depth.threads() == 11
    depth.fetched(10.0)
    assert depth.threads() == 32
    quick = Depth(floor=4, ceiling=32)
    quick.fetched(0.0002)
    quick.work_s = 0.01
    assert quick.threads() == 4


def test_a_slow_store_gets_more_fetches_in_flight_than_the_floor():
    """Fetches of 50 ms taken by a stream that does little between takes: once measured, more
    than `threads` run at once (the pool grows to the depth), and the values come in order."""
    running, peak, lock = [0], [0], threading.Lock()

    def plan():
        for index in range(60):

            def fetch(i=index):
                with lock:
                    running[0] += 1
                    peak[0] = max(peak[0], running[0])
                time.sleep(0.05)
                with lock:
                    running[0] -= 1
                return b"x" * (i + 1)

            yield Task(("unit", index), fetch, 1)

    ahead = ReadAhead(budget_bytes=1 << 20, threads=2, ramp_start=MAX_AHEAD)
    ahead.follow(plan())
    try:
        got = [len(ahead.take(("unit", i), lambda: b"")) for i in range(60)]
    finally:
        ahead.close()
    assert got == list(range(1, 61)) and ahead.misses == 0
    assert peak[0] > 2 and ahead.depth.threads() > 2, (peak[0], ahead.depth.threads())


def test_tasks_that_fill_the_budget_exactly_both_start():
    fetched: list[int] = []
    ahead = ReadAhead(budget_bytes=200, threads=4, ramp_start=MAX_AHEAD)
    ahead.follow(_tasks([100] * 5, fetched))
    try:
        _wait_for(lambda: len(fetched) >= 2)
        time.sleep(0.2)
        assert len(fetched) == 2 and ahead.held == 200
    finally:
        ahead.close()


def test_a_task_pinned_for_two_keys_is_released_once():
    ahead = ReadAhead(budget_bytes=1000)
    ahead.pin(Task("file", lambda: b"x" * 50, 50), {"a": (lambda v: v, 1), "b": (lambda v: v, 1)})
    try:
        assert ahead.take("a", lambda: None, stream=False) == b"x" * 50
        assert ahead.take("b", lambda: None, stream=False) == b"x" * 50
        assert ahead.held == 0
    finally:
        ahead.close()
    assert ahead.held == 0


def test_close_frees_what_pinned_rows_hold():
    ahead = ReadAhead(budget_bytes=1000)
    ahead.pin(Task("file", lambda: b"x" * 50, 50), {"a": (lambda v: v, 3)})
    _wait_for(lambda: ahead.stats()["fetched_bytes"] == 50)
    ahead.close()
    assert ahead.held == 0


def test_a_task_passed_while_it_runs_is_not_charged_when_it_ends():
    gate = threading.Event()
    ahead = ReadAhead(budget_bytes=10_000, threads=2, ramp_start=4)
    running = Task(("a", 0), lambda: gate.wait(5) and b"x" * 300, 100)
    ahead.follow(iter([running, Task(("b", 1), lambda: b"y", 1)]))  # two kinds: both start
    try:
        _wait_for(lambda: running.future is not None and running.future.running())
        assert ahead.take(("b", 1), lambda: None) == b"y"  # the first passed: dropped while it runs
        gate.set()
        _wait_for(lambda: running.future.done())
        time.sleep(0.1)  # its completion is counted
        assert ahead.held == 0
    finally:
        ahead.close()


def test_a_kinds_expansion_is_the_most_any_came_back_to():
    ahead = ReadAhead(budget_bytes=10_000, threads=1)
    ahead.follow(iter([Task(("rg", 0), lambda: b"x" * 300, 100), Task(("rg", 1), lambda: b"x" * 100, 100)]))
    try:
        ahead.take(("rg", 0), lambda: None)
        ahead.take(("rg", 1), lambda: None)
        assert ahead._charge(Task(("rg", 2), lambda: None, 100)) == 300  # x3, not the last one's x1
    finally:
        ahead.close()


def test_following_a_new_plan_drops_the_old_plans_tasks():
    ahead = ReadAhead(budget_bytes=1000, threads=2)
    ahead.follow(_tasks([10, 10]))
    ahead.follow(iter([Task("new", lambda: b"n", 1)]))
    try:
        assert ahead.take(("unit", 0), lambda: "inline") == "inline"
        assert ahead.stats()["misses"] == 1
    finally:
        ahead.close()


def test_early_hints_take_at_most_half_the_window():
    def plan():
        yield Early(first)
        yield Early(second)
        while True:
            yield PENDING

    first, second = Task(("meta", 0), lambda: b"0", 1), Task(("meta", 1), lambda: b"1", 1)
    ahead = ReadAhead(budget_bytes=1000, threads=4, ramp_start=2)
    ahead.follow(plan())
    try:
        assert first.future is not None and second.future is None  # a window of 2: one early task
    finally:
        ahead.close()


def test_a_ceiling_under_the_floor_is_the_floor():
    from bagel_data.sources.read_depth import Depth

    depth = Depth(8, 4)
    depth.fetched(1.0)  # a slow store: it would ask for many more
    depth.returned()
    depth.asking()
    assert depth.threads() == 8


def test_a_fetch_started_after_close_never_runs():
    from bagel_data.sources.read_depth import DepthPool

    ran: list[int] = []
    pool = DepthPool(1, 2, "test-pool")
    pool.close()
    future = pool.start(lambda: ran.append(1))
    time.sleep(0.1)
    assert future.cancelled() and ran == []
