"""A resumed buffer rebuilt on threads (packing/rebuild.py) changes only the waiting: the
same packs, the same counted skips, the rows no thread started rebuilt by the packer."""

from __future__ import annotations

import collections
import itertools
import logging
import pickle
import threading

import pytest

from bagel_bench.slow_reads import delayed_storage, row_group_bytes
from bagel_data import ConfigError, build_dataloader, make_bagel_multimodal_dataset
from bagel_data.checkpoint.collect import worker_dataset_states
from bagel_data.errors import SkipReason
from bagel_data.packing import groups, overflow, rebuild
from bagel_data.sample import Draw
from helpers.batches import assert_same_batch
from helpers.noise_t2i import noise_t2i_packed, write_noise_t2i
from helpers.three_groups import FRAMES, three_groups_config, three_groups_info

GROUPS = three_groups_config(vlm_sft={"frame_sampler_args": FRAMES})
# A buffer used only below 300 tokens: greedy too holds several samples at a checkpoint.
PACKING = dict(
    expected_num_tokens=1490, max_num_tokens=1500, max_num_tokens_per_sample=900, max_buffer_size=6,
    prefer_buffer_before=300,
)  # fmt: skip


@pytest.fixture
def threads_rebuilt(monkeypatch) -> list[str]:
    """The names of the threads that rebuilt rows ahead; by default three threads, whatever
    the machine (`rebuild_threads` set explicitly wins over this)."""
    names: list[str] = []
    clean = rebuild._clean_rebuild

    def counted(dataset, cursor):
        names.append(threading.current_thread().name)
        return clean(dataset, cursor)

    monkeypatch.setattr(overflow, "rebuild_threads", lambda: 3)
    monkeypatch.setattr(rebuild, "_clean_rebuild", counted)
    return names


def _resume_once(build, cut: int = 2, count: int = 2) -> list:
    loader = build_dataloader(build(), num_workers=0)
    list(itertools.islice(loader, cut))
    return packs(build(), count, state=loader.state_dict())


@pytest.fixture(scope="module")
def dataset_info(golden_root):
    return three_groups_info()


def three_groups(dataset_info, tokenizer, special_tokens, **overrides):
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer, special_tokens=special_tokens, grouped_datasets=GROUPS, dataset_info=dataset_info,
        num_workers=1, data_seed=5, **{**PACKING, **overrides},
    )  # fmt: skip


def packs(dataset, count: int, state=None) -> list:
    loader = build_dataloader(dataset, num_workers=0)
    if state is not None:
        loader.load_state_dict(state)
    return list(itertools.islice(loader, count))


@pytest.mark.parametrize("strategy", ["greedy", "best_fit"])
def test_a_buffer_rebuilt_on_threads_resumes_exactly(
    dataset_info, tokenizer, special_tokens, threads_rebuilt, monkeypatch, strategy
):
    def build(**overrides):
        return three_groups(dataset_info, tokenizer, special_tokens, pack_strategy=strategy, **overrides)

    in_order: list = []  # rows the packer rebuilt itself, in order
    rebuild_in_order = groups.FamilyGroup.sample_at
    monkeypatch.setattr(groups.FamilyGroup, "sample_at", lambda *a: in_order.append(a) or rebuild_in_order(*a))
    reference = packs(build(read_ahead_bytes=0), 10)  # no read-ahead: no rebuild threads
    assert not threads_rebuilt
    rebuilt_any = False
    for cut in (2, 5):
        loader = build_dataloader(build(), num_workers=0)
        list(itertools.islice(loader, cut))
        state = pickle.loads(pickle.dumps(loader.state_dict()))
        saved = worker_dataset_states(state)[0]
        restored = len(saved["stages"]["overflow"]["buffer"]) + (saved["stages"]["overflow"]["carry"] is not None)
        del threads_rebuilt[:], in_order[:]
        resumed = packs(build(), 10 - cut, state=state)
        for index, (want, have) in enumerate(zip(reference[cut:], resumed, strict=True)):
            assert_same_batch(have, want, f"{strategy}, cut {cut}, pack {cut + index}")
        rebuilt_any |= any(name.startswith("bagel-data-rebuild") for name in threads_rebuilt)
        # each restored row is rebuilt once: ahead (by a thread or the packer helping) or in order
        assert len(threads_rebuilt) + len(in_order) == restored, (len(threads_rebuilt), len(in_order), restored)
    assert rebuilt_any, "no buffered row was rebuilt on a thread: the test does not test it"


@pytest.mark.parametrize(
    ("settings", "on_threads"),
    [
        ({"rebuild_threads": 0}, False),  # asked for none
        ({"read_ahead_bytes": 0}, False),  # everything inline
        ({"compat": "bagel"}, False),  # the rows replay one shared stream: in order
        ({"rebuild_threads": 1}, True),  # asked for one, on any machine
    ],
)
def test_who_rebuilds_on_threads(dataset_info, tokenizer, special_tokens, threads_rebuilt, settings, on_threads):
    def build():
        return three_groups(dataset_info, tokenizer, special_tokens, pack_strategy="best_fit", **settings)

    assert _resume_once(build)
    workers = {name for name in threads_rebuilt if name.startswith("bagel-data-rebuild")}
    assert bool(workers) == on_threads, threads_rebuilt
    if settings.get("rebuild_threads") == 1:
        assert workers == {"bagel-data-rebuild-0"}


@pytest.mark.parametrize("value", [-1, 2.5, "four", True])
def test_a_bad_rebuild_threads_is_named_at_construction(dataset_info, tokenizer, special_tokens, value):
    with pytest.raises(ConfigError, match="rebuild_threads"):
        three_groups(dataset_info, tokenizer, special_tokens, rebuild_threads=value)


# -- a row that fails where a thread rebuilds it -----------------------------------------
def _t2i_packed(folder, tokenizer, special_tokens):
    return noise_t2i_packed(
        folder, tokenizer, special_tokens, pack_strategy="best_fit", max_buffer_size=5, read_ahead_bytes=1 << 20
    )


def test_a_row_that_fails_on_a_thread_is_the_same_counted_skip(tmp_path, tokenizer, special_tokens, monkeypatch):
    write_noise_t2i(tmp_path)
    loader = build_dataloader(_t2i_packed(tmp_path, tokenizer, special_tokens), num_workers=0)
    list(itertools.islice(loader, 2))
    state = loader.state_dict()
    dataset = _t2i_packed(tmp_path, tokenizer, special_tokens)
    buffered = worker_dataset_states(state)[0]["stages"]["overflow"]["buffer"]
    assert len(buffered) >= 2, buffered
    unit_id, _, row_group, _ = dataset.grouped_datasets[0].row_key(tuple(buffered[0]["cursor"]))
    path = dataset.grouped_datasets[0].epoch_units[unit_id]
    broken = {path: row_group_bytes(path, row_group)}

    runs = {}
    for threads in (0, 3):
        monkeypatch.setattr(overflow, "rebuild_threads", lambda threads=threads: threads)
        resumed = _t2i_packed(tmp_path, tokenizer, special_tokens)
        with delayed_storage(fail=broken):
            batches = packs(resumed, 4, state=state)
        runs[threads] = batches, resumed.stats["skips"]["t2i"]
    (inline, inline_skips), (threaded, threaded_skips) = runs[0], runs[3]
    assert inline_skips, "the broken file's buffered rows were not skipped: the test does not test it"
    assert threaded_skips == inline_skips
    for index, (want, have) in enumerate(zip(inline, threaded, strict=True)):
        assert_same_batch(have, want, f"pack {index} after the resume")


# -- the queue itself, with a stand-in family ----------------------------------------------
class StandIn:
    """`sample_at` of a family: cursor (i,) gives {"i": i}; `bad` rows count a skip (and
    still give what they could), `raising` rows raise; `hold` rows wait for an event first.
    `order` lists the rows as they are built."""

    dataset_name = "stand_in"
    parallel_rebuild = True

    def __init__(self, bad=(), raising=(), hold=None):
        self.bad, self.raising, self.hold = set(bad), set(raising), hold or {}
        self.built_on: dict[int, str] = {}
        self.order: list[int] = []
        self.entered = collections.defaultdict(threading.Event)  # row -> its build began

    def sample_at(self, cursor, log=None, pending=False):
        (i,) = cursor
        self.entered[i].set()
        if i in self.hold:
            assert self.hold[i].wait(10), f"row {i} was never released"
        self.built_on[i] = threading.current_thread().name
        self.order.append(i)
        if i in self.raising:
            raise OSError(f"row {i} cannot be read")
        if i in self.bad:
            log.skip(SkipReason.ROW_FAILED, f"row {i}", "broken")
            return {"i": i, "partial": True}
        return {"i": i}


def items(count: int) -> list[Draw]:
    return [Draw(0, (i,)) for i in range(count)]


def test_rows_come_back_by_item_and_failures_are_left_to_the_packer(caplog):
    family = StandIn(bad={2}, raising={4})
    waiting = items(6)
    with caplog.at_level(logging.WARNING):
        rebuild.rebuild_ahead(waiting, [family], threads=2)
        got = [rebuild.take_rebuilt(item) for item in waiting]
    taken_by_packer = [i for i, sample in enumerate(got) if sample is None]
    assert {2, 4} <= set(taken_by_packer)  # a skip or an error: the packer's own rebuild counts or raises it
    assert all(got[i] == {"i": i} for i in range(6) if i not in taken_by_packer)
    assert "broken" not in caplog.text  # warned once, by the packer's rebuild, not here too
    assert all(item.rebuilt is None for item in waiting)


def test_the_packer_rebuilds_young_rows_while_a_thread_holds_the_oldest():
    release = threading.Event()
    family = StandIn(hold={0: release})
    waiting = items(5)
    original = family.sample_at

    def sample_at(cursor, log=None, pending=False):
        sample = original(cursor, log, pending)
        if cursor == (1,):  # the last row the packer gets to: the held one may go on
            release.set()
        return sample

    family.sample_at = sample_at
    rebuild.rebuild_ahead(waiting, [family], threads=1)
    assert family.entered[0].wait(10)  # its thread holds the oldest row
    assert rebuild.take_rebuilt(waiting[0]) == {"i": 0}
    here = threading.current_thread().name
    assert family.built_on[0].startswith("bagel-data-rebuild")
    assert [family.built_on[i] for i in (4, 3, 2, 1)] == [here] * 4
    assert family.order == [4, 3, 2, 1, 0]  # youngest first, while it waited for the oldest
    assert [rebuild.take_rebuilt(item) for item in waiting[1:]] == [{"i": i} for i in range(1, 5)]


def test_a_row_no_thread_started_is_the_packers():
    release = threading.Event()
    family = StandIn(hold={0: release})
    waiting = items(3)
    rebuild.rebuild_ahead(waiting, [family], threads=1)
    assert family.entered[0].wait(10)  # its one thread waits on row 0
    assert rebuild.take_rebuilt(waiting[2]) is None  # not started: taken back, not built twice
    release.set()
    assert rebuild.take_rebuilt(waiting[0]) == {"i": 0}
    assert 2 not in family.built_on


def test_stop_leaves_the_rows_not_started():
    release = threading.Event()
    family = StandIn(hold={0: release})
    waiting = items(4)
    stop = rebuild.rebuild_ahead(waiting, [family], threads=1)
    assert family.entered[0].wait(10)
    stop()
    release.set()
    assert rebuild.take_rebuilt(waiting[0]) == {"i": 0}  # the row its thread was on
    assert [rebuild.take_rebuilt(item) for item in waiting[1:]] == [None] * 3
    assert set(family.built_on) == {0}


def test_only_families_that_allow_it_and_only_when_there_is_work_to_share():
    class OneAtATime(StandIn):
        parallel_rebuild = False

    waiting = items(4)
    rebuild.rebuild_ahead(waiting, [OneAtATime()], threads=4)
    assert all(item.rebuilt is None for item in waiting)
    for threads, count in ((0, 4), (3, 1)):  # no thread, or a single row
        waiting = items(count)
        rebuild.rebuild_ahead(waiting, [StandIn()], threads=threads)
        assert all(item.rebuilt is None for item in waiting)
    done = items(3)
    done[0].sample = {"i": 0}  # already rebuilt (or never left the process)
    rebuild.rebuild_ahead(done, [StandIn()], threads=2)
    assert done[0].rebuilt is None and done[1].rebuilt is not None


@pytest.mark.parametrize(("cpus", "threads"), [(1, 0), (2, 1), (16, 8), (64, 8)])
def test_threads_leave_the_packer_a_cpu_and_stay_few(monkeypatch, cpus, threads):
    def affinity(pid: int) -> set[int]:
        assert pid == 0, "this process's CPUs"
        return set(range(cpus))

    monkeypatch.setattr(rebuild.os, "sched_getaffinity", affinity, raising=False)
    assert rebuild.rebuild_threads() == threads


@pytest.mark.parametrize(("count", "threads"), [(6, 5), (None, 0)])
def test_without_an_affinity_the_cpu_count_decides(monkeypatch, count, threads):
    monkeypatch.delattr(rebuild.os, "sched_getaffinity", raising=False)  # e.g. macOS
    monkeypatch.setattr(rebuild.os, "cpu_count", lambda: count)
    assert rebuild.rebuild_threads() == threads


@pytest.mark.parametrize(("rows", "threads", "started"), [(4, 8, 3), (4, 2, 2), (2, 8, 1)])
def test_no_more_threads_than_rows_beside_the_packers_own(rows, threads, started):
    release = threading.Event()
    family = StandIn(hold={i: release for i in range(rows)})
    before = set(threading.enumerate())
    rebuild.rebuild_ahead(items(rows), [family], threads=threads)
    try:
        for row in range(started):  # each thread holds a row
            assert family.entered[row].wait(10)
        new = [thread for thread in set(threading.enumerate()) - before if thread.name.startswith("bagel-data-rebuild")]
        assert len(new) == started
        assert not family.entered[started].is_set()  # the last row is left for the packer
    finally:
        release.set()
