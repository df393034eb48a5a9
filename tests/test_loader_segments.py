"""The packed pipeline through `build_dataloader` with 2 workers, whose batch tensors come from
recycled shared-memory segments (packing/segments.py): batches held by the consumer keep
their content, and reuse changes no batch."""

from __future__ import annotations

import functools
import itertools
import os

import pytest

from bagel_data import build_dataloader, make_bagel_multimodal_dataset
from bagel_data.packing import segments
from bagel_data.packing.buffers import PadBufferPool
from helpers.batches import assert_same_batch
from helpers.golden import absolute_dataset_info, load_case

pytestmark = [
    pytest.mark.skipif(not segments.recycling_supported(), reason="this torch cannot count storage uses"),
    pytest.mark.filterwarnings("ignore::bagel_data.errors.ConfigWarning"),  # the case's mandatory groups
]
LARGE = ("padded_images", "packed_vit_tokens")  # the tensors that come from the worker's pool
BATCHES = 24


@pytest.fixture(scope="module")
def case():
    case, _, _ = load_case("packed_three_groups_flex")
    return case, absolute_dataset_info(case)


def loader(case, tokenizer, special_tokens, capacity: int = segments.DEFAULT_CAPACITY):
    case, info = case
    dataset = make_bagel_multimodal_dataset(
        tokenizer=tokenizer, special_tokens=special_tokens, grouped_datasets=case["grouped_datasets"],
        dataset_info=info, num_workers=2, data_seed=case["data_seed"], **case["packing"],
    )  # fmt: skip
    dataset.pad_pool_factory = functools.partial(PadBufferPool, shared_capacity=capacity)
    return build_dataloader(dataset, num_workers=2)


def segment_id(tensor) -> tuple[int, int]:
    status = os.fstat(tensor.untyped_storage()._get_shared_fd())
    return status.st_dev, status.st_ino


def test_held_batches_keep_their_content_and_equal_unrecycled_ones(case, tokenizer, special_tokens):
    # The same stream with a fresh segment per tensor, as before: each batch kept as it came.
    expected = list(itertools.islice(loader(case, tokenizer, special_tokens, capacity=0), BATCHES))
    held, views, tensors, seen = {}, {}, 0, set()
    for index, batch in enumerate(itertools.islice(loader(case, tokenizer, special_tokens), BATCHES)):
        fields = batch.to_dict()
        storages = {v.untyped_storage().data_ptr() for v in fields.values() if hasattr(v, "untyped_storage")}
        assert len(storages) <= 3, "the small tensors travel in one segment beside the two large ones"
        for key in LARGE:
            if key in fields:
                tensors += 1
                seen.add(segment_id(fields[key]))
        if index in (1, 2):
            held[index] = batch  # a training loop's batch, held while later ones arrive
        if index in (3, 4) and "packed_vit_tokens" in fields:
            views[index] = fields["packed_vit_tokens"][1:, 5:]  # a view kept after its batch is dropped
        else:
            assert_same_batch(batch, expected[index], f"batch {index}")  # dirty segments pad with zeros too
        del batch, fields
    for index, batch in held.items():
        assert_same_batch(batch, expected[index], f"held batch {index}")
    assert views, "no view kept: the case should have ViT tokens in batches 3-4"
    for index, view in views.items():
        assert view.equal(expected[index].packed_vit_tokens[1:, 5:]), f"view of batch {index}"
    assert tensors >= BATCHES and len(seen) <= 2 * segments.DEFAULT_CAPACITY + 4, (len(seen), tensors)


def test_uint8_pixels_cross_workers_in_recycled_segments_and_normalize_to_the_float_stream(
    case, tokenizer, special_tokens
):
    name, info = case
    raw_case = (dict(name, packing=dict(name["packing"], pixel_format="uint8")), info)
    expected = list(itertools.islice(loader(case, tokenizer, special_tokens), BATCHES))
    pixels, reused = 0, set()
    for index, batch in enumerate(itertools.islice(loader(raw_case, tokenizer, special_tokens), BATCHES)):
        fields = batch.to_dict(raw=True)
        assert len({v.untyped_storage().data_ptr() for v in fields.values() if hasattr(v, "untyped_storage")}) <= 3
        for key in LARGE:
            if key in fields:
                pixels += 1
                assert fields[key].dtype.itemsize == 1 and fields[key].is_shared()
                assert fields[key].nbytes * 4 == getattr(expected[index], key).nbytes
                reused.add(segment_id(fields[key]))
        assert_same_batch(batch.cuda("cpu").normalize_pixels(), expected[index], f"batch {index}")
        del batch, fields
    assert pixels >= BATCHES and len(reused) <= 2 * segments.DEFAULT_CAPACITY + 4, (len(reused), pixels)
