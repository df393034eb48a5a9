"""The collated batch: one packed sequence with device moves, as the reference's API has it."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .instruments import seam
from .media.pixels import has_raw_pixels, normalize_pixels


def _map_tensors(value, move: Callable[[torch.Tensor], torch.Tensor]):
    if isinstance(value, torch.Tensor):
        return move(value)
    if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
        return [move(item) for item in value]
    return value


class SimpleCustomBatch:
    """A packed batch (`batch_size` is always 1) whose fields are attributes.

    `pin_memory()` makes the DataLoader pin it; `cuda(device)` moves every tensor;
    `normalize_pixels()` turns `pixel_format: uint8` pixels into the float32 tensors of the
    default format (on the device, after `cuda`); `to_dict()` gives the batch dict back for
    the model's forward.
    """

    # The fields every packed batch has (docs/formats/batch.md); the others depend on its content.
    sequence_length: int
    sample_lens: list[int]
    packed_text_ids: torch.Tensor
    packed_text_indexes: torch.Tensor
    packed_position_ids: torch.Tensor
    batch_data_indexes: list[dict]

    @seam("collate")
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

    def normalize_pixels(self) -> SimpleCustomBatch:
        """uint8 pixels and their mean / std -> the default format's float32 `padded_images`
        and `packed_vit_tokens`, bit for bit, where they lie (media/pixels.py). A float32
        batch is left as it is. Returns the batch: `batch.cuda(device).normalize_pixels()`."""
        fields = normalize_pixels(self.to_dict(raw=True))
        for name in set(self._fields) - set(fields):
            delattr(self, name)
        for name, value in fields.items():
            setattr(self, name, value)
        self._fields = list(fields)
        return self

    def to_dict(self, raw: bool = False) -> dict:
        """The batch dict. With `pixel_format: uint8` call `normalize_pixels()` first: the
        model takes every key as an argument and expects float32 pixels, so a batch still
        holding uint8 pixels raises here unless `raw=True` (e.g. to normalize it yourself)."""
        fields = {name: getattr(self, name) for name in self._fields}
        if not raw and has_raw_pixels(fields):
            raise ValueError(
                "this batch holds uint8 pixels (pixel_format: uint8): call batch.normalize_pixels() "
                "after moving it to the device, e.g. batch.cuda(device).normalize_pixels().to_dict(), "
                "or to_dict(raw=True) for the uint8 fields and their mean / std"
            )
        return fields

    def __repr__(self) -> str:
        return f"SimpleCustomBatch(sequence_length={self.sequence_length}, samples={len(self.batch_data_indexes)})"


def collate_wrapper() -> Callable[[list[dict]], SimpleCustomBatch]:
    """The collate function for a DataLoader over a `PackedDataset`."""
    return SimpleCustomBatch


def bagel_packed_collate_fn(batch: list[dict]) -> SimpleCustomBatch:
    """The collate function itself (NeMo AutoModel's name): `batch` holds one pack."""
    return SimpleCustomBatch(batch)
