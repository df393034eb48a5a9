"""The golden data's three groups (T2I, edit, VLM) at small image sizes, as a run config:
what the resume, read-ahead and rebuild tests pack."""

from __future__ import annotations

import copy

from helpers.golden import absolute_dataset_info, load_case

TRANSFORM = {"image_stride": 16, "max_image_size": 128, "min_image_size": 64}
_GROUPS = {
    "t2i_pretrain": {"dataset_names": ["t2i"], "image_transform_args": TRANSFORM, "num_used_data": [3], "weight": 2},
    "unified_edit": {
        "dataset_names": ["edit"],
        "image_transform_args": TRANSFORM,
        "vit_image_transform_args": {"image_stride": 14, "max_image_size": 112, "min_image_size": 56},
        "num_used_data": [2],
        "weight": 1,
    },
    "vlm_sft": {
        "dataset_names": ["vlm"],
        "image_transform_args": {"image_stride": 14, "max_image_size": 140, "min_image_size": 42, "max_pixels": 15680},
        "num_used_data": [1000],
        "weight": 1,
    },
}
FRAMES = {"max_num_frames": 6, "min_num_frames": 2}  # the VLM clip's frames, when a test samples them


def three_groups_config(**changes: dict) -> dict:
    """`grouped_datasets` of the three groups, each group updated with `changes[group]`."""
    groups = copy.deepcopy(_GROUPS)
    for name, change in changes.items():
        groups[name].update(change)
    return groups


def three_groups_info() -> dict:
    """Their `dataset_info`, with absolute paths into the golden data."""
    case, _, _ = load_case("packed_three_groups_flex")
    return absolute_dataset_info(case)
