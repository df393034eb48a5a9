"""Mirrors `nemo_automodel.components.datasets.multimodal.utils`: layout helpers."""

from ..packing.layout import (
    get_flattened_position_ids_extrapolate,
    get_flattened_position_ids_interpolate,
    len2weight,
    patchify,
    prepare_attention_mask_per_sample,
)

__all__ = [
    "get_flattened_position_ids_extrapolate",
    "get_flattened_position_ids_interpolate",
    "len2weight",
    "patchify",
    "prepare_attention_mask_per_sample",
]
