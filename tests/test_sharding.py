"""Splitting units over ranks and workers, epochs and per-sample generators (SPEC 6, 8.3)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bagel_data.errors import ConfigError
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.sharding import WorkerTopology, split_evenly
from helpers.builders import solid_jpeg, write_t2i
from helpers.golden import as_worker

# The walk by whole units (tars', a user family's, compat's); the default mode's walk by rows, which
# feeds any worker count, is tests/test_row_walk.py's.
pytestmark = pytest.mark.walk_by_units


TRANSFORM = ImageTransform(32, 16, 16)


# -- split_evenly -------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(count=st.integers(0, 2000), parts=st.integers(1, 64))
def test_split_evenly_covers_once_and_balances(count, parts):
    slices = [split_evenly(count, parts, i) for i in range(parts)]
    assert [i for s in slices for i in s] == list(range(count))  # contiguous, in order, once each
    sizes = [len(s) for s in slices]
    base, extra = divmod(count, parts)
    assert sizes == [base + 1] * extra + [base] * (parts - extra)  # remainder to the first parts


@pytest.mark.parametrize("count, parts", [(12, 3), (12, 4), (7, 7), (100, 10)])
def test_split_evenly_equal_slices_when_it_divides(count, parts):
    size = count // parts
    assert [split_evenly(count, parts, i) for i in range(parts)] == [
        range(i * size, (i + 1) * size) for i in range(parts)
    ]


@given(st.integers(1, 5), st.integers(0, 4))
def test_every_worker_of_every_rank_has_its_own_global_index(world, workers):
    """An elastic restart hands each old worker's leftovers to a new worker by this index:
    it must number all ranks x workers once each, from 0."""
    topologies = [WorkerTopology(r, world, w, workers) for r in range(world) for w in range(max(workers, 1))]
    indices = [t.global_worker for t in topologies]
    assert sorted(i for i, _ in indices) == list(range(len(topologies)))
    assert {total for _, total in indices} == {len(topologies)}


def test_split_evenly_remainder_example():
    assert [list(split_evenly(7, 3, i)) for i in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]


# -- a real family ------------------------------------------------------------------------
def _make_files(folder, num_files: int) -> list[str]:
    """`num_files` one-row T2I files; file i's caption is "file i"."""
    files = [[[{"image": solid_jpeg(16, 16), "captions": {"c": f"file {i}"}}]] for i in range(num_files)]
    return write_t2i(folder, files)


class _NoTokenizer:
    """Sharding never tokenizes; iteration tests pass the real tokenizer."""

    def encode(self, text):
        return [0]


def _dataset(folder, num_used, rank=0, world=1, workers=1, tokenizer=None, **kwargs) -> T2IIterableDataset:
    return T2IIterableDataset(
        "t2i",
        TRANSFORM,
        tokenizer or _NoTokenizer(),
        [str(folder)],
        [num_used],
        local_rank=rank,
        world_size=world,
        num_workers=workers,
        **kwargs,
    )


def _shards(folder, num_used, world, workers):
    """({(rank, worker): unit ids}, every worker's paths) as simulated DataLoader workers see them."""
    shards, paths = {}, []
    for rank in range(world):
        dataset = _dataset(folder, num_used, rank, world, workers)
        for worker in range(workers):
            with as_worker(worker, workers):
                shards[rank, worker] = [int(i) for i in dataset.worker_shard().unit_ids]
                paths.extend(dataset.get_data_paths_per_worker()[0])
    return shards, paths, dataset.data_paths


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("num_used", [9, 11, 14])
def test_every_unit_assigned_once_and_worker_lists_reversed(tmp_path, world, workers, num_used):
    _make_files(tmp_path, 5)  # num_used > 5: files repeat, units are still distinct
    shards, paths, data_paths = _shards(tmp_path, num_used, world, workers)
    all_ids = sorted(i for ids in shards.values() for i in ids)
    assert all_ids == list(range(num_used))
    assert sorted(paths) == sorted(data_paths)  # each repeated file as often as listed
    expected_start = 0
    for rank in range(world):
        rank_size = len(split_evenly(num_used, world, rank))
        rank_ids = []
        for worker in range(workers):
            ids = shards[rank, worker]
            assert ids == sorted(ids, reverse=True)  # reversed contiguous slice
            assert ids == list(range(ids[0], ids[0] - len(ids), -1))
            rank_ids.extend(reversed(ids))
            sizes_left = len(split_evenly(rank_size, workers, worker))
            assert len(ids) == sizes_left
        assert rank_ids == list(range(expected_start, expected_start + rank_size))
        expected_start += rank_size


def test_reference_slices_when_it_divides(tmp_path):
    _make_files(tmp_path, 12)
    world, workers = 2, 3
    for rank in range(world):
        dataset = _dataset(tmp_path, 12, rank, world, workers)
        units = sorted(dataset.data_paths)
        random.Random(42).shuffle(units)
        assert dataset.epoch_units == units
        rank_list = units[rank * 6 : (rank + 1) * 6]
        assert dataset.data_paths_per_rank == rank_list
        for worker in range(workers):
            with as_worker(worker, workers):
                paths, worker_id = dataset.get_data_paths_per_worker()
            assert worker_id == worker
            assert paths == rank_list[worker * 2 : (worker + 1) * 2][::-1]


def _caption(sample, tokenizer) -> str:
    return tokenizer.decode(sample["text_ids_list"][0])


def test_iteration_follows_worker_list(tmp_path, tokenizer):
    paths = _make_files(tmp_path, 6)
    dataset = _dataset(tmp_path, 6, rank=1, world=2, workers=2, tokenizer=tokenizer)
    for worker in range(2):
        with as_worker(worker, 2):
            worker_paths, _ = dataset.get_data_paths_per_worker()
            samples = list(itertools.islice(iter(dataset), 2 * len(worker_paths)))
        expected = [f"file {paths.index(p)}" for p in worker_paths] * 2  # loops forever
        assert [_caption(s, tokenizer) for s in samples] == expected
        assert [s["data_indexes"]["worker_id"] for s in samples] == [worker] * len(samples)
        assert [s["data_indexes"]["data_indexes"][0] for s in samples] == list(range(len(worker_paths))) * 2


def test_too_few_units_is_a_config_error_at_construction(tmp_path):
    _make_files(tmp_path, 3)
    with pytest.raises(ConfigError, match=r"at least 6 are needed") as info:
        _dataset(tmp_path, 5, rank=0, world=2, workers=3)
    assert "5 units" in str(info.value)
    assert "num_used_data" in str(info.value)
    _dataset(tmp_path, 6, rank=0, world=2, workers=3)  # exactly enough is fine


def test_too_few_units_for_actual_dataloader_workers(tmp_path):
    _make_files(tmp_path, 3)
    dataset = _dataset(tmp_path, 3, workers=1)
    with as_worker(0, 4), pytest.raises(ConfigError, match=r"at least 4 are needed"):
        next(iter(dataset))


def test_bad_rank_is_a_config_error(tmp_path):
    _make_files(tmp_path, 3)
    with pytest.raises(ConfigError):
        _dataset(tmp_path, 3, rank=2, world=2)


def test_set_epoch_seed_decides_the_order(tmp_path):
    _make_files(tmp_path, 10)
    a, b = _dataset(tmp_path, 10), _dataset(tmp_path, 10)
    assert a.epoch_units == b.epoch_units  # both seeded 42 at construction
    a.set_epoch(1)
    b.set_epoch(1)
    assert a.epoch_units == b.epoch_units
    first = list(a.epoch_units)
    a.set_epoch(2)
    assert a.epoch_units != first
    assert sorted(a.epoch_units) == sorted(first)
    expected = sorted(a.data_paths)
    random.Random(2).shuffle(expected)
    assert a.epoch_units == expected
    a.set_epoch(1)
    assert a.epoch_units == first


def test_repeated_set_epoch_shuffles_once(tmp_path, monkeypatch):
    """The constructor's set_epoch(42) and an entrance's repeated set_epoch(seed) make one
    epoch order, on first use, equal to random.Random(seed).shuffle of the sorted units."""
    _make_files(tmp_path, 12)
    shuffles: list = []
    real = random.Random.shuffle
    monkeypatch.setattr(random.Random, "shuffle", lambda self, x: shuffles.append(len(x)) or real(self, x))
    dataset = _dataset(tmp_path, 12)
    dataset.set_epoch(5)
    dataset.set_epoch(5)
    assert shuffles == []
    expected = sorted(dataset.data_paths)
    real(random.Random(5), expected)
    assert dataset.epoch_units == expected and dataset.epoch_units == expected
    assert shuffles == [12]
    dataset.set_epoch(5)  # the same seed again: the order is kept
    assert dataset.epoch_units == expected and shuffles == [12]
    dataset.set_epoch(6)
    assert sorted(dataset.epoch_units) == sorted(expected) and shuffles == [12, 12]


def test_a_numpy_units_order_equals_the_list_shuffle():
    """VLM units are a numpy arange, shuffled through a memoryview: the list's permutation."""
    from bagel_data.families.base import DistributedIterableDataset
    from bagel_data.families.unit_kinds import JsonlLines

    dataset = DistributedIterableDataset("lines", num_workers=1)
    dataset.data_paths = list(range(1000))
    dataset.units.kind = JsonlLines(dataset.data_paths)  # an arange over the lines
    dataset.set_epoch(9)
    expected = list(range(1000))
    random.Random(9).shuffle(expected)
    assert dataset.epoch_units.tolist() == expected


def _draws(dataset, *key) -> list[int]:
    return dataset.sample_rng(*key).integers(0, 2**62, size=4).tolist()


def test_sample_rng_reproducible_and_position_dependent(tmp_path):
    _make_files(tmp_path, 4)
    a, b = _dataset(tmp_path, 4), _dataset(tmp_path, 4)
    assert _draws(a, 3, 0, 1) == _draws(a, 3, 0, 1) == _draws(b, 3, 0, 1)
    keys = [(3, 0, 1), (3, 0, 2), (3, 1, 1), (4, 0, 1), (3, 0), (0,)]
    values = [tuple(_draws(a, *key)) for key in keys]
    assert len(set(values)) == len(values)
    a.set_epoch(7)
    assert _draws(a, 3, 0, 1) != _draws(b, 3, 0, 1)
    b.set_epoch(7)
    assert _draws(a, 3, 0, 1) == _draws(b, 3, 0, 1)


def test_sample_rng_does_not_touch_global_generators(tmp_path):
    import torch

    _make_files(tmp_path, 4)
    dataset = _dataset(tmp_path, 4)
    states = random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone()
    list(itertools.islice(iter(dataset), 6))
    dataset.set_epoch(3)
    _draws(dataset, 1, 2)
    assert random.getstate() == states[0]
    assert np.array_equal(np.random.get_state()[1], states[1])
    assert torch.equal(torch.get_rng_state(), states[2])
