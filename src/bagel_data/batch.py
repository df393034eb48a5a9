"""The collated batch: one packed sequence with device moves, as the reference's API has it."""

from __future__ import annotations

from collections.abc import Callable

import torch


def _map_tensors(value, move: Callable[[torch.Tensor], torch.Tensor]):
    if isinstance(value, torch.Tensor):
        return move(value)
    if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
        return [move(item) for item in value]
    return value


class SimpleCustomBatch:
    """A packed batch (`batch_size` is always 1) whose fields are attributes.

    `pin_memory()` makes the DataLoader pin it; `cuda(device)` moves every tensor;
    `to_dict()` gives the batch dict back for the model's forward.
    """

    # The fields every packed batch has (docs/formats/batch.md); the others depend on its content.
    sequence_length: int
    sample_lens: list[int]
    packed_text_ids: torch.Tensor
    packed_text_indexes: torch.Tensor
    packed_position_ids: torch.Tensor
    batch_data_indexes: list[dict]

    def __init__(self, batch: list[dict]):
        if len(batch) != 1:
            raise ValueError(f"a packed batch holds one sequence; got {len(batch)} (use batch_size=1)")
        self._fields = list(batch[0])
        for name, value in batch[0].items():
            setattr(self, name, value)
        self.use_flex = "nested_attention_masks" not in self._fields

    def _apply(self, move: Callable[[torch.Tensor], torch.Tensor]) -> SimpleCustomBatch:
        for name in self._fields:
            setattr(self, name, _map_tensors(getattr(self, name), move))
        return self

    def pin_memory(self) -> SimpleCustomBatch:
        return self._apply(lambda tensor: tensor.pin_memory())

    def cuda(self, device) -> SimpleCustomBatch:
        return self._apply(lambda tensor: tensor.to(device, non_blocking=True))

    def to(self, device) -> SimpleCustomBatch:
        return self.cuda(device)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self._fields}

    def __repr__(self) -> str:
        return f"SimpleCustomBatch(sequence_length={self.sequence_length}, samples={len(self.batch_data_indexes)})"


def collate_wrapper() -> Callable[[list[dict]], SimpleCustomBatch]:
    """The collate function for a DataLoader over a `PackedDataset`."""
    return SimpleCustomBatch


def bagel_packed_collate_fn(batch: list[dict]) -> SimpleCustomBatch:
    """The collate function itself (NeMo AutoModel's name): `batch` holds one pack."""
    return SimpleCustomBatch(batch)
