"""The padded_images buffers: reused only when nothing uses them, and always padded with zeros."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from bagel_data.packing import buffers
from bagel_data.packing.pack import pad_images

pytestmark = pytest.mark.skipif(not buffers._CAN_ADVISE, reason="huge-page mappings need Linux's MADV_HUGEPAGE")
BIG = (4, 3, 512, 1024)  # 24 MiB: above HUGE_PAGE_MIN_BYTES


def test_zeroed_float32_is_zeros_and_writable():
    tensor = buffers.zeroed_float32(BIG)
    assert tensor.shape == BIG and tensor.dtype == torch.float32
    assert not tensor.any()
    tensor[1, 2, 3, 4] = 5.0
    assert tensor.sum().item() == 5.0


def test_a_buffer_in_use_is_never_handed_out_again():
    pool = buffers.PadBufferPool(capacity=2)
    first, zeroed = pool.float32(BIG)
    assert zeroed
    view = first[1:2]  # a view alone keeps the memory in use
    del first
    gc.collect()
    second, _ = pool.float32(BIG)
    assert second.data_ptr() != view.data_ptr() - view.storage_offset() * 4
    address = second.data_ptr()
    del second
    reused, zeroed = pool.float32(BIG)
    assert reused.data_ptr() == address and not zeroed


def test_a_buffer_moved_to_shared_memory_is_free_again():
    pool = buffers.PadBufferPool(capacity=1)
    batch, _ = pool.float32(BIG)
    address = batch.data_ptr()
    batch.share_memory_()  # what a DataLoader worker does when it sends the batch
    assert batch.data_ptr() != address
    again, zeroed = pool.float32(BIG)
    assert again.data_ptr() == address and not zeroed
    assert not batch.any(), "the shared copy must not change when the pool reuses the old memory"


def test_a_larger_pack_fits_a_freed_buffer():
    pool = buffers.PadBufferPool(capacity=1)
    small, _ = pool.float32(BIG)
    address = small.data_ptr()
    del small
    larger, zeroed = pool.float32((6, 3, 512, 1024))  # within the 2x head room
    assert larger.data_ptr() == address and not zeroed


def test_padding_from_a_dirty_buffer_equals_fresh_zero_padding():
    rng = np.random.default_rng(0)
    pool = buffers.PadBufferPool(capacity=1)
    for _ in range(6):
        dirty, _ = pool.float32((8, 3, 1024, 1024))
        dirty.fill_(float("nan"))
        del dirty
        shapes = [(3, int(rng.integers(64, 1025)), int(rng.integers(64, 1025))) for _ in range(int(rng.integers(1, 9)))]
        images = [torch.from_numpy(rng.random(shape, dtype=np.float32)) for shape in shapes]
        expected = torch.zeros((len(images), 3, max(s[1] for s in shapes), max(s[2] for s in shapes)))
        for index, image in enumerate(images):
            expected[index, :, : image.shape[1], : image.shape[2]] = image
        got = pad_images(images, pool)
        assert torch.equal(got, expected)
        del got


def test_when_every_buffer_is_in_use_a_new_one_is_lent_and_not_kept():
    pool = buffers.PadBufferPool(capacity=2)
    live = [pool.float32(BIG)[0] for _ in range(3)]
    assert len({tensor.data_ptr() for tensor in live}) == 3
    assert len(pool.mappings) == 2
    kept = {live[0].data_ptr(), live[1].data_ptr()}
    del live
    again = [pool.float32(BIG)[0] for _ in range(2)]
    assert {tensor.data_ptr() for tensor in again} == kept


def test_inside_a_dataloader_worker_batch_buffers_are_born_in_shared_memory(monkeypatch):
    shape = (4, 3, 1024, 1024)  # above the huge-page threshold: pooled in the main process
    assert not buffers.PadBufferPool().float32(shape)[0].is_shared() and not buffers.empty_float32(shape).is_shared()
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    padded, zeroed = buffers.PadBufferPool().float32(shape)
    assert padded.is_shared() and zeroed and not padded.any()
    assert buffers.empty_float32(shape).is_shared()


def _address(mapping) -> int:
    return torch.frombuffer(mapping, dtype=torch.uint8, count=1).data_ptr()


def test_vit_token_buffers_are_pooled_apart_from_padded_images():
    pool = buffers.PadBufferPool(capacity=1)
    tokens = pool.empty((4096, 588))  # 9.2 MiB: above HUGE_PAGE_MIN_BYTES
    padded, _ = pool.float32(BIG)
    assert [_address(m) for m in pool._tokens.mappings] == [tokens.data_ptr()]
    assert [_address(m) for m in pool.mappings] == [padded.data_ptr()]
    address = tokens.data_ptr()
    del tokens
    again = pool.empty((4000, 588))
    assert again.data_ptr() == address, "a freed packed_vit_tokens buffer is lent again"
    assert pool.empty((4000, 588)).data_ptr() != address, "one still in use is not"
    assert len(pool._tokens.mappings) == 1
    small = pool.empty((16, 588))  # under POOL_MIN_BYTES: not pooled
    assert small.shape == (16, 588) and small.data_ptr() not in (address, padded.data_ptr())


def test_in_shared_memory_a_batchs_small_tensors_share_one_segment():
    pool = buffers.PadBufferPool(shared=True)
    padded, _ = pool.float32(BIG)
    batch = {
        "padded_images": padded,
        "packed_text_ids": torch.arange(7, dtype=torch.int64),
        "packed_timesteps": torch.rand(3),
        "flags": torch.tensor([True, False, True]),
        "packed_position_ids": torch.arange(12, dtype=torch.int32).view(3, 4).t(),  # not contiguous
        "empty": torch.zeros(0, dtype=torch.int64),
        "sample_lens": [3, 4],
    }
    expected = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    pool.gather_small(batch)
    small = [k for k in batch if k not in ("padded_images", "sample_lens")]
    assert len({batch[k].untyped_storage().data_ptr() for k in small}) == 1
    assert batch["padded_images"] is padded and batch["sample_lens"] == [3, 4]
    for key in small:
        assert batch[key].is_shared() and batch[key].dtype == expected[key].dtype
        assert torch.equal(batch[key], expected[key]), key
        assert batch[key].data_ptr() % 64 == 0


def test_in_the_main_process_the_batch_is_left_as_it_is():
    batch = {"packed_text_ids": torch.arange(7)}
    tensor = batch["packed_text_ids"]
    buffers.PadBufferPool(shared=False).gather_small(batch)
    assert batch["packed_text_ids"] is tensor and not tensor.is_shared()


def test_a_freed_buffer_of_exactly_the_size_asked_is_lent_again():
    pool = buffers.PadBufferPool(capacity=1)
    first, _ = pool.float32(BIG)  # a mapping of twice its bytes
    address = first.data_ptr()
    del first
    exact, zeroed = pool.float32((2 * BIG[0], *BIG[1:]))  # all of that mapping
    assert exact.data_ptr() == address and not zeroed and len(pool.mappings) == 1


def test_two_buffers_are_kept_by_default():
    pool = buffers.PadBufferPool()  # the training loop holds one batch while the next is built
    live = [pool.float32(BIG)[0] for _ in range(3)]
    assert len(pool.mappings) == 2 and len({t.data_ptr() for t in live}) == 3
