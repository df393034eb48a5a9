"""The collated batch (`batch.py`): its attention mode and how it moves its tensors."""

from __future__ import annotations

import torch

from bagel_data.batch import SimpleCustomBatch


def _batch(**extra) -> SimpleCustomBatch:
    fields = {"sequence_length": 3, "sample_lens": [3], "packed_text_ids": torch.tensor([1, 2, 3]), **extra}
    return SimpleCustomBatch([fields])


def test_a_batch_uses_flex_attention_unless_it_carries_nested_masks():
    assert _batch().use_flex is True
    assert _batch(nested_attention_masks=[torch.zeros(3, 3)]).use_flex is False


def test_moving_a_batch_moves_every_tensor_and_each_tensor_of_a_list_even_a_list_of_one():
    seen = []

    def move(tensor):
        seen.append(tensor)
        return tensor.to(torch.float64)

    batch = _batch(nested_attention_masks=[torch.zeros(3, 3)], batch_data_indexes=[{"dataset_name": "t2i"}])
    batch._apply(move)
    assert batch.packed_text_ids.dtype == torch.float64
    assert [mask.dtype for mask in batch.nested_attention_masks] == [torch.float64]
    assert batch.batch_data_indexes == [{"dataset_name": "t2i"}] and batch.sample_lens == [3]
    assert len(seen) == 2
    pair = _batch(nested_attention_masks=[torch.zeros(2, 2), torch.ones(1, 1)])._apply(move)
    assert [mask.dtype for mask in pair.nested_attention_masks] == [torch.float64, torch.float64]
