"""Every `packed_*` golden case with `pixel_format: uint8`: the bytes, normalized, are the
float32 batch of the default format bit for bit, and the reference's digests where it has them."""

from __future__ import annotations

import itertools

import pytest
import torch

from bagel_data.batch import SimpleCustomBatch
from bagel_data.media.pixels import SIDE_KEYS
from bagel_data.packing.invariants import check_batch
from conformance.test_golden_packed import build_packed
from helpers.golden import as_worker, case_runs, check_tensor, load_case

PIXELS = tuple(SIDE_KEYS)


def _batches(case: dict, compat, tokenizer, special_tokens, pixel_format: str):
    case = dict(case, packing=dict(case["packing"], pixel_format=pixel_format))
    dataset = build_packed(case, tokenizer, special_tokens, compat)
    with as_worker(case["worker_id"], case["num_workers"]):
        return dataset, list(itertools.islice(iter(dataset), case["count"]))


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.dtype == b.dtype):
            return False
        if a.dtype == torch.float32:  # bit for bit: torch.equal takes -0.0 for 0.0
            return torch.equal(a.view(torch.int32), b.view(torch.int32))
        return torch.equal(a, b)
    if isinstance(a, list) and a and isinstance(a[0], torch.Tensor):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize(("name", "compat"), case_runs("packed"))
def test_uint8_pixels_normalize_to_the_float_batch(name, compat, tokenizer, special_tokens):
    case, expected, arrays = load_case(name)
    _, floats = _batches(case, compat, tokenizer, special_tokens, "float32")
    dataset, raws = _batches(case, compat, tokenizer, special_tokens, "uint8")
    assert dataset.config.pixel_format == "uint8"
    assert len(raws) == len(floats) == case["count"]
    seen = set()
    for index, (raw, want) in enumerate(zip(raws, floats)):
        check_batch(raw, dataset.config, dataset.special_tokens)  # the side tensors, then the float batch
        for key in PIXELS:
            if key in raw:
                seen.add(key)
                assert raw[key].dtype == torch.uint8 and raw[key].nbytes * 4 == want[key].nbytes
        batch = SimpleCustomBatch([raw]).normalize_pixels().to_dict()
        assert list(batch) == list(want), f"batch {index}: keys"
        for key in want:
            assert _same(batch[key], want[key]), f"batch {index} {key}"
        for key in PIXELS:
            if key in batch:
                reference = arrays.get(f"b{index}/{key}") if arrays is not None else None
                check_tensor(f"batch {index} {key}", batch[key], expected["batches"][index][key], reference)
    assert seen, "a case without pixels tests nothing here"
