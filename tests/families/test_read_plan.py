"""Reading ahead changes nothing but the waiting: the same packs bit for bit, the same
resume, the same counted skips; a resumed buffer is fetched one open per file."""

from __future__ import annotations

import itertools
import os
import pickle
import threading

import pyarrow.parquet as pq
import pytest
import torch

from bagel_bench.slow_reads import OpenCounter, delayed_storage, row_group_bytes
from bagel_data import ImageTransform, T2IIterableDataset, build_dataloader, make_bagel_multimodal_dataset
from bagel_data.families.reads import ParquetSource
from helpers.batches import assert_same_batch
from helpers.noise_t2i import noise_t2i_packed, write_noise_t2i
from helpers.three_groups import three_groups_config, three_groups_info

ON, OFF = 1 << 20, 0
GROUPS = three_groups_config()
PACKING = dict(expected_num_tokens=1490, max_num_tokens=1500, max_num_tokens_per_sample=900, max_buffer_size=4)


@pytest.fixture(scope="module")
def dataset_info(golden_root):
    return three_groups_info()


def three_groups(dataset_info, tokenizer, special_tokens, read_ahead: int, num_workers: int = 0):
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer, special_tokens=special_tokens, grouped_datasets=GROUPS, dataset_info=dataset_info,
        num_workers=max(num_workers, 1), data_seed=3, read_ahead_bytes=read_ahead, **PACKING,
    )  # fmt: skip


def packs(dataset, count: int, num_workers: int = 0, state=None) -> list:
    loader = build_dataloader(dataset, num_workers=num_workers)
    if state is not None:
        loader.load_state_dict(state)
    return list(itertools.islice(loader, count))


def assert_same_stream(a: list, b: list, what: str) -> None:
    assert len(a) == len(b)
    for index, (x, y) in enumerate(zip(a, b)):
        assert_same_batch(x, y, f"{what}, pack {index}")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_packed_stream_is_the_same_with_and_without_read_ahead(
    dataset_info, tokenizer, special_tokens, num_workers
):
    inline_dataset = three_groups(dataset_info, tokenizer, special_tokens, OFF, num_workers)
    inline = packs(inline_dataset, 10, num_workers)
    ahead_dataset = three_groups(dataset_info, tokenizer, special_tokens, ON, num_workers)
    ahead = packs(ahead_dataset, 10, num_workers)
    assert_same_stream(inline, ahead, f"{num_workers} workers")
    if num_workers == 0:  # in this process: the same skips; its read-ahead answered every read it foresaw
        skips = inline_dataset.stats["skips"]
        assert sum(sum(counts.values()) for counts in skips.values()) > 0, "the data has bad rows"
        assert ahead_dataset.stats["skips"] == skips
        stats = ahead_dataset.stats["read_ahead"]
        assert set(stats) == set(GROUPS)
        assert all(group["hits"] > 0 and group["peak_bytes"] > 0 for group in stats.values())
        assert all(group["misses"] == 0 for group in stats.values())


def test_workers_forked_while_this_process_reads_ahead(dataset_info, tokenizer, special_tokens):
    """Threads and locks do not survive a fork: each DataLoader worker starts its own."""
    reference = packs(three_groups(dataset_info, tokenizer, special_tokens, OFF, 2), 6, 2)
    dataset = three_groups(dataset_info, tokenizer, special_tokens, ON, 2)
    stream = iter(dataset)
    try:
        next(stream)  # this process now has read-ahead threads running
        assert read_ahead_threads()
        assert_same_stream(reference, packs(dataset, 6, 2), "forked beside running threads")
    finally:
        stream.close()


def read_ahead_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("bagel-read-ahead") and t.is_alive()}


def test_no_read_ahead_thread_outlives_its_stream(dataset_info, tokenizer, special_tokens):
    before = read_ahead_threads()  # another test's, if it failed before closing its stream
    dataset = three_groups(dataset_info, tokenizer, special_tokens, ON)
    stream = iter(dataset)
    next(stream)
    assert read_ahead_threads() - before
    stream.close()  # what a DataLoader worker does at its end
    assert not read_ahead_threads() - before


@pytest.mark.parametrize(("saved_with", "resumed_with"), [(ON, ON), (OFF, ON), (ON, OFF)])
def test_a_checkpoint_resumes_exactly_through_the_read_ahead(
    dataset_info, tokenizer, special_tokens, saved_with, resumed_with
):
    reference = packs(three_groups(dataset_info, tokenizer, special_tokens, OFF), 12)
    for cut in (3, 7):
        loader = build_dataloader(three_groups(dataset_info, tokenizer, special_tokens, saved_with), num_workers=0)
        list(itertools.islice(loader, cut))
        state = pickle.loads(pickle.dumps(loader.state_dict()))
        resumed = packs(three_groups(dataset_info, tokenizer, special_tokens, resumed_with), 12 - cut, state=state)
        assert_same_stream(reference[cut:], resumed, f"cut {cut}")


# -- a read that fails mid-stream -------------------------------------------------------
def test_a_failing_read_is_the_same_counted_skip_with_read_ahead(tmp_path, tokenizer, special_tokens):
    paths = write_noise_t2i(tmp_path)
    broken = {paths[1]: row_group_bytes(paths[1], 1)}  # the middle file's second row group (2 rows)
    runs = {}
    for budget in (OFF, ON):
        dataset = noise_t2i_packed(tmp_path, tokenizer, special_tokens, read_ahead_bytes=budget)
        with delayed_storage(fail=broken):
            batches = packs(dataset, 12)
        runs[budget] = batches, dataset.stats["skips"]["t2i"]
    (inline, inline_skips), (ahead, ahead_skips) = runs[OFF], runs[ON]
    lost = inline_skips.get("row_group_unreadable", 0)
    assert lost > 0 and lost % 2 == 0, inline_skips  # its two rows, once per pass
    assert ahead_skips == inline_skips
    assert_same_stream(inline, ahead, "a row group fails to read")


def test_a_resumed_buffer_is_fetched_one_open_per_file(tmp_path, tokenizer):
    paths = write_noise_t2i(tmp_path)

    def family():
        return T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(tmp_path)], [3], num_workers=1)

    # Rows spread over every file and row group, several from the same row group.
    cursors = [(0, unit, group, row) for unit in range(3) for group, row in ((0, 0), (0, 2), (1, 1), (2, 0))]
    expected = [family().sample_at(cursor) for cursor in cursors]
    rebuilt = family()
    opens = OpenCounter()
    with delayed_storage(opens=opens):
        rebuilt.prefetch_rows(cursors, ON)
        got = [rebuilt.sample_at(cursor) for cursor in cursors]
    rebuilt.stop_read_ahead()
    assert dict(opens.counts) == {path: 1 for path in paths}
    assert rebuilt.read_ahead_stats()["misses"] == 0
    # ... and the row groups came with that one fetch, not read one by one as rows were rebuilt.
    pinned = {(paths[unit], group) for _, unit, group, _ in cursors}
    sizes = sum(pq.ParquetFile(path).metadata.row_group(group).total_byte_size for path, group in pinned)
    assert rebuilt.read_ahead_stats()["fetched_bytes"] >= sizes // 2
    for cursor, want, have in zip(cursors, expected, got):
        assert_same_value(have, want, str(cursor))


def assert_same_value(a, b, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same_value(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b)):
            assert_same_value(x, y, f"{where}[{index}]")
    else:
        assert a == b, where


def test_an_older_stream_ending_leaves_the_newer_one_reading_ahead(tmp_path, tokenizer):
    write_noise_t2i(tmp_path)
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(tmp_path)], [3], num_workers=1)
    inline = [cursor for cursor, _ in itertools.islice(family.iter_samples(), 12)]
    first = family.iter_samples(read_ahead=ON)
    next(first)
    second = family.iter_samples(read_ahead=ON)
    got = [next(second)[0]]
    first.close()  # e.g. an abandoned iterator collected late
    got += [cursor for cursor, _ in itertools.islice(second, 11)]
    assert got == inline
    assert family.read_ahead_stats()["misses"] == 0 and family.read_ahead_stats()["hits"] > 0
    second.close()


def test_a_family_that_plans_no_reads_reads_inline(tmp_path, tokenizer, monkeypatch):
    """A family of one's own without read tasks: the plan stops at once (no walk over
    every unit of a pass), and every read runs inline, as without read-ahead."""
    write_noise_t2i(tmp_path)
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(tmp_path)], [3], num_workers=1)
    inline = [cursor for cursor, _ in itertools.islice(family.iter_samples(), 10)]
    monkeypatch.setattr(family, "read_source", lambda: ParquetSource(lambda unit_id, row_start: None, list))
    stream = family.iter_samples(read_ahead=ON)
    assert [cursor for cursor, _ in itertools.islice(stream, 10)] == inline
    stats = family.read_ahead_stats()
    assert stats["hits"] == 0 and stats["misses"] > 0 and stats["fetched_bytes"] == 0
    stream.close()


def test_a_file_that_cannot_be_opened_leaves_the_rest_read_ahead(tmp_path, tokenizer):
    """A footer that fails to read is the family's counted skip; the plan goes on to the
    next file (it does not stop reading ahead at the first bad one)."""
    paths = write_noise_t2i(tmp_path)
    size = os.path.getsize(paths[1])
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(tmp_path)], [3], num_workers=1)
    with delayed_storage(fail={paths[1]: (size - 8, size)}):  # the footer's length and magic
        inline = [cursor for cursor, _ in itertools.islice(family.iter_samples(), 12)]
        stream = family.iter_samples(read_ahead=ON)
        ahead = [cursor for cursor, _ in itertools.islice(stream, 12)]
        stream.close()
    assert ahead == inline
    assert family.skip_log.counts["unit_unreadable"] > 0
    stats = family.read_ahead_stats()
    assert stats["misses"] == 0 and stats["hits"] > 0, stats
