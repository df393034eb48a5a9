"""Recycled shared-memory segments (packing/segments.py) through real DataLoader workers:
a segment is written again only once nothing uses it in the receiving process."""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import sys
import time
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from bagel_data.batch import SimpleCustomBatch, collate_wrapper
from bagel_data.loader import build_dataloader
from bagel_data.packing import segments
from bagel_data.packing.buffers import PadBufferPool

needs_recycling = pytest.mark.skipif(not segments.recycling_supported(), reason="this torch cannot count storage uses")


@pytest.mark.skipif(sys.platform != "linux", reason="the environment the project is measured in")
def test_this_torch_supports_recycling():
    # Otherwise every other test here is skipped and workers fall back to fresh segments.
    assert segments.recycling_supported()


def stamp(worker: int, index: int) -> float:
    return float(worker * 10_000 + index)


class Stamped(IterableDataset):
    """Each item: two tensors from the worker's pool, filled with a value naming the item."""

    def __init__(self, capacity: int = segments.DEFAULT_CAPACITY, items: int | None = None):
        self.capacity, self.items = capacity, items
        self.num_workers = 2

    def __iter__(self):
        pool = PadBufferPool(shared_capacity=self.capacity)  # in a worker: shared memory
        worker = get_worker_info().id
        for index in itertools.count() if self.items is None else range(self.items):
            rows = 32 + 16 * (index % 5)  # sizes vary, so segments are also replaced
            images, _ = pool.float32((rows, 1024))
            images.fill_(stamp(worker, index))
            tokens = pool.empty((rows // 2, 256)).fill_(-stamp(worker, index))
            assert images.is_shared() and tokens.is_shared()
            lent = pool.segments
            yield {"padded_images": images, "packed_vit_tokens": tokens, "where": (worker, index),
                   "allocated": lent.allocated, "reused": lent.reused}  # fmt: skip


def first(items: list):
    return items[0]


def fields(batch) -> dict:
    return batch.to_dict() if isinstance(batch, SimpleCustomBatch) else batch


LOADERS = {
    "torch DataLoader, SimpleCustomBatch": lambda ds: DataLoader(ds, num_workers=2, collate_fn=collate_wrapper()),
    "torch DataLoader, the dict itself": lambda ds: DataLoader(ds, num_workers=2, collate_fn=first),
    "build_dataloader": lambda ds: build_dataloader(ds, num_workers=2),
}


@needs_recycling
@pytest.mark.parametrize("make_loader", LOADERS.values(), ids=LOADERS.keys())
def test_a_held_batch_and_a_kept_view_are_never_overwritten(make_loader):
    iterator = iter(make_loader(Stamped()))
    held = view = None
    for n in range(60):
        batch = next(iterator)
        if n == 3:
            held = batch  # the whole batch, as a training loop holding it
        if n == 5:
            view = fields(batch)["packed_vit_tokens"][2:5, 10:]  # a view outlives its batch
            view_where = fields(batch)["where"]
        del batch
    worker, index = fields(held)["where"]
    assert torch.all(fields(held)["padded_images"] == stamp(worker, index))
    assert torch.all(fields(held)["packed_vit_tokens"] == -stamp(worker, index))
    assert torch.all(view == -stamp(*view_where))
    last = fields(next(iterator))
    assert last["reused"] > 20, "the segments were not lent again"
    del iterator


@needs_recycling
def test_a_batch_moved_to_copies_releases_its_segments_at_once():
    # What the DataLoader's pin-memory thread (`SimpleCustomBatch.pin_memory`) and `.cuda()` do:
    # every tensor replaced by a copy. The batches stay held; their segments are free again.
    iterator = iter(DataLoader(Stamped(), num_workers=2, collate_fn=collate_wrapper()))
    kept = [next(iterator)._apply(torch.clone) for _ in range(30)]
    for batch in kept:
        assert torch.all(batch.padded_images == stamp(*batch.where))
    assert kept[-1].reused >= 20 and kept[-1].allocated <= segments.DEFAULT_CAPACITY
    del iterator


@needs_recycling
def test_segments_are_reused_once_released_and_not_otherwise():
    counts = {}
    for capacity in (segments.DEFAULT_CAPACITY, 0):
        iterator = iter(DataLoader(Stamped(capacity), num_workers=2, collate_fn=first))
        for _ in range(40):
            batch = next(iterator)
            del batch
        last = next(iterator)
        counts[capacity] = (last["allocated"], last["reused"], last["where"][1] + 1)
        del last, iterator
    allocated, reused, items = counts[segments.DEFAULT_CAPACITY]
    assert allocated <= segments.DEFAULT_CAPACITY and allocated + reused == 2 * items
    assert counts[0] == (2 * counts[0][2], 0, counts[0][2])  # no pool: a fresh segment per tensor


@needs_recycling
def test_a_received_segment_passed_on_is_a_copy():
    iterator = iter(DataLoader(Stamped(), num_workers=2, collate_fn=first))
    batch = next(iterator)
    images = batch["padded_images"]
    forwarded = ForkingPickler.loads(ForkingPickler.dumps(images))  # as to a third process
    assert torch.equal(forwarded, images) and forwarded.is_shared()
    assert forwarded.data_ptr() != images.data_ptr(), "the lender would overwrite what the third process reads"
    plain = torch.ones(4).share_memory_()  # anything else is still shared, not copied
    assert ForkingPickler.loads(ForkingPickler.dumps(plain)).data_ptr() == plain.data_ptr()
    del iterator


def _shm_files(pids: set[int]) -> set[str]:
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return {name for name in names if name.startswith("torch_") and int(name.split("_")[1]) in pids}


@contextlib.contextmanager
def sharing_strategy(name: str):
    before = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy(name)
    try:
        yield
    finally:
        torch.multiprocessing.set_sharing_strategy(before)


SHM_LOADERS = ["torch DataLoader, SimpleCustomBatch", "build_dataloader"]


def _files_left(pids: set[int], allowed: int) -> set[str]:
    deadline = time.monotonic() + 10  # workers exit, and torch's manager removes files, soon after
    while len(_shm_files(pids)) > allowed and time.monotonic() < deadline:
        time.sleep(0.1)
    return _shm_files(pids)


@needs_recycling
@pytest.mark.parametrize("strategy", sorted(torch.multiprocessing.get_all_sharing_strategies()))
@pytest.mark.parametrize("make_loader", [LOADERS[name] for name in SHM_LOADERS], ids=SHM_LOADERS)
def test_no_shared_memory_file_is_left_after_the_loader_is_deleted(strategy, make_loader):
    with sharing_strategy(strategy):
        for finished in (True, False):
            iterator = iter(make_loader(Stamped(items=12 if finished else None)))
            pids = {os.getpid(), *(worker.pid for worker in iterator._workers)}
            held = [next(iterator) for _ in range(3)]
            reused = [fields(batch)["reused"] for batch in (iterator if finished else itertools.islice(iterator, 12))]
            assert reused[-1] > 0
            if strategy == "file_system":  # named files while in use (file_descriptor unlinks them at once)
                assert _shm_files(pids)
            del iterator
            gc.collect()
            del held
            # Unfinished, the batches still in flight (2 per worker, 2 tensors each) and each pool's
            # counters may stay (file_system): torch's manager removes them when this process
            # exits, as for any shared tensor sent and never received.
            allowed = 0 if finished else 2 * (2 * 2 + 1)
            assert len(_files_left(pids, allowed)) <= allowed


@needs_recycling
def test_a_reducer_registered_over_ours_stops_the_recycling(monkeypatch):
    pool = segments.SegmentPool()
    first, _ = pool.float32((16, 16))  # installs the reducer
    del first
    again, zeroed = pool.float32((16, 16))
    assert not zeroed and pool.reused == 1
    del again
    torch_reduce = segments._torch_reduce
    monkeypatch.setitem(ForkingPickler._extra_reducers, torch.UntypedStorage, torch_reduce)
    # Sends through torch's own reducer are not counted, so nothing may be lent again.
    _, zeroed = pool.float32((16, 16))
    assert zeroed and not pool.enabled and pool.segments == [] and pool.reused == 1


# -- one pool in this process: which segment is lent, kept or replaced ------------------------
def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


@needs_recycling
def test_the_smallest_free_segment_that_fits_is_lent_again():
    pool = segments.SegmentPool(capacity=3)
    small, zeroed_small = pool.float32((100,))  # segments of twice the bytes asked: 800 ...
    large, zeroed_large = pool.float32((400,))  # ... and 3200
    assert zeroed_small and zeroed_large and pool.allocated == 2 and pool.reused == 0
    assert [s.nbytes() for s in pool.segments] == [800, 3200]
    small.fill_(3.0)
    del small, large
    again, zeroed = pool.float32((50,))  # both fit: the smaller is lent, as written before
    assert not zeroed and pool.reused == 1 and _storage(again) == pool.segments[0].data_ptr()
    assert torch.all(again == 3.0)
    bigger, _ = pool.float32((150,))  # the 800-byte one is in use, 1200 bytes fit only the other
    assert _storage(bigger) == pool.segments[1].data_ptr() and pool.reused == 2 and pool.allocated == 2
    half = pool.float32((200,), torch.uint8)[0]  # 200 bytes of uint8: a new segment, the others are in use
    assert half.dtype == torch.uint8 and half.shape == (200,) and len(pool.segments) == 3
    assert pool.segments[2].nbytes() == 400


@needs_recycling
def test_a_full_pool_replaces_a_free_segment_too_small_and_keeps_none_while_all_are_used():
    pool = segments.SegmentPool(capacity=1)
    first, _ = pool.float32((10,))
    del first
    larger, zeroed = pool.float32((1000,))  # the free one is too small: replaced by a larger one
    assert zeroed and pool.allocated == 2 and pool.reused == 0 and len(pool.segments) == 1
    assert _storage(larger) == pool.segments[0].data_ptr() and pool.segments[0].nbytes() == 8000
    extra, zeroed = pool.float32((10,))  # the only segment is in use: a fresh one, not kept
    assert zeroed and pool.allocated == 3 and len(pool.segments) == 1
    assert _storage(extra) != pool.segments[0].data_ptr() and extra.is_shared()
    del larger
    again, zeroed = pool.float32((10,))
    assert not zeroed and pool.reused == 1 and _storage(again) == pool.segments[0].data_ptr()


def test_without_capacity_every_tensor_is_a_fresh_shared_segment():
    pool = segments.SegmentPool(capacity=0)
    assert not pool.enabled
    tensors = [pool.float32((4, 4))[0] for _ in range(3)]
    assert all(t.is_shared() and not t.any() for t in tensors) and pool.allocated == 3 and pool.segments == []
    gathered = pool.gather({"a": torch.arange(5)})
    assert torch.equal(gathered["a"], torch.arange(5)) and pool.allocated == 4


@pytest.mark.parametrize("capacity", [0, 2])
def test_gather_puts_each_tensor_aligned_in_one_segment(capacity):
    pool = segments.SegmentPool(capacity=capacity)
    small = {
        "bytes": torch.arange(3, dtype=torch.uint8),
        "longs": torch.arange(5, dtype=torch.int64) * 7,
        "floats": torch.full((2, 3), 0.25),
        "empty": torch.zeros(0, dtype=torch.int32),
        "last": torch.tensor([True, False]),
    }
    gathered = pool.gather(small)
    assert list(gathered) == list(small)
    base = gathered["bytes"].untyped_storage().data_ptr()
    for name, tensor in gathered.items():
        assert torch.equal(tensor, small[name]) and tensor.dtype == small[name].dtype, name
        assert tensor.untyped_storage().data_ptr() == base, name  # one segment
    # each starts on a 64-byte boundary after the one before: 0, 64, 128, 192 (empty), 192
    offsets = [t.storage_offset() * t.element_size() for t in gathered.values()]
    assert offsets == [0, 64, 128, 192, 192]
    assert pool.gather({}) == {} and pool.gather({"none": torch.zeros(0)})["none"].numel() == 0


@needs_recycling
def test_a_pool_inherited_through_fork_lends_none_of_its_parents_segments():
    pool = segments.SegmentPool(capacity=2)
    parents, _ = pool.float32((64,))
    parents.fill_(5.0)
    kept = pool.segments[0]
    del parents
    pool.pid = -1  # as in a child forked after the parent made the pool
    child, zeroed = pool.float32((64,))
    assert zeroed and pool.pid == os.getpid() and pool.reused == 0
    assert len(pool.segments) == 1 and pool.segments[0] is not kept and _storage(child) != kept.data_ptr()
    # the parent's segment, sent on from here, is a copy: the parent may write it again
    view = torch.empty(0).set_(kept)
    forwarded = ForkingPickler.loads(ForkingPickler.dumps(view))
    assert torch.all(forwarded[:64] == 5.0) and forwarded.data_ptr() != kept.data_ptr()
