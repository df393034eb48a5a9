"""Every grouped_datasets value is checked by type and range: a bad one is a ConfigError
naming the key and the value, never a silent misread or a raw Python error."""

from __future__ import annotations

import math

import pytest

from bagel_data.config import parse_groups
from bagel_data.errors import ConfigError

NAN, INF = math.nan, math.inf
T2I, EDIT, VLM = "t2i_pretrain", "unified_edit", "vlm_sft"

# (group, key, bad value, the dotted key the error must name)
BAD_GROUP_VALUES = [
    (VLM, "is_mandatory", "false", "vlm_sft.is_mandatory"),
    (VLM, "is_mandatory", 0, "vlm_sft.is_mandatory"),
    (VLM, "shuffle_lines", "no", "vlm_sft.shuffle_lines"),
    (VLM, "shuffle_seed", "0", "vlm_sft.shuffle_seed"),
    (VLM, "shuffle_seed", 1.5, "vlm_sft.shuffle_seed"),
    (VLM, "shuffle_seed", True, "vlm_sft.shuffle_seed"),
    (T2I, "resume_data_status", "yes", "t2i_pretrain.resume_data_status"),
    (T2I, "weight", -1, "t2i_pretrain.weight"),
    (T2I, "weight", NAN, "t2i_pretrain.weight"),
    (T2I, "weight", INF, "t2i_pretrain.weight"),
    (T2I, "weight", "1", "t2i_pretrain.weight"),
    (T2I, "weight", True, "t2i_pretrain.weight"),
    (T2I, "num_used_data", ["3"], "t2i_pretrain.num_used_data"),
    (T2I, "num_used_data", [0], "t2i_pretrain.num_used_data"),
    (T2I, "num_used_data", [True], "t2i_pretrain.num_used_data"),
    (T2I, "num_used_data", 3, "t2i_pretrain.num_used_data"),
    (T2I, "num_used_data", [3, 4], "t2i_pretrain.num_used_data"),
    (T2I, "dataset_names", "t2i", "t2i_pretrain.dataset_names"),
    (T2I, "dataset_names", [], "t2i_pretrain.dataset_names"),
    (T2I, "dataset_names", [7], "t2i_pretrain.dataset_names"),
    (T2I, "file_order", "random", "t2i_pretrain.file_order"),
    (T2I, "image_transform_args", "512", "t2i_pretrain.image_transform_args"),
    (EDIT, "vit_image_transform_args", None, "unified_edit.vit_image_transform_args"),
    (VLM, "frame_sampler_args", "rand", "vlm_sft.frame_sampler_args"),
    (VLM, "frame_sampler_args", {"max_frames": 8}, "vlm_sft.frame_sampler_args"),
    (VLM, "frame_sampler_args", {"max_num_frames": "8"}, "vlm_sft.frame_sampler_args.max_num_frames"),
    (VLM, "frame_sampler_args", {"max_num_frames": 4, "min_num_frames": 8}, "vlm_sft.frame_sampler_args.min_num_frames"),
    (VLM, "frame_sampler_args", {"max_num_frames": 8, "sample": "every"}, "vlm_sft.frame_sampler_args.sample"),
]  # fmt: skip

# (group, transform key, bad value)
BAD_TRANSFORM_VALUES = [
    ("image_stride", 0),
    ("image_stride", "16"),
    ("image_stride", 16.0),
    ("max_image_size", -1),
    ("min_image_size", None),
    ("max_pixels", 0),
    ("image_mean", [0.5]),
    ("image_mean", [0.5, 0.5, "x"]),
    ("image_mean", "0.5"),
    ("image_std", [0, 0, 0]),
    ("image_std", [0.5, 0.5, NAN]),
    ("image_std", [0.5, 0.5, -0.5]),
    ("fast_decode", "true"),
]


def expect(grouped, info, key: str, value=None):
    with pytest.raises(ConfigError) as caught:
        parse_groups(grouped, info, None)
    error = caught.value
    assert error.key == key or error.key.startswith(key + "["), str(error)
    assert error.fix, "says what to do"
    if value is not None:
        assert repr(value) in str(error) or str(value) in str(error)
    return str(error)


@pytest.mark.parametrize(("group", "key", "value", "named"), BAD_GROUP_VALUES)
def test_bad_group_value(grouped, info, group, key, value, named):
    grouped[group][key] = value
    expect(grouped, info, named)


@pytest.mark.parametrize("group", [T2I, EDIT, VLM])
@pytest.mark.parametrize(("key", "value"), BAD_TRANSFORM_VALUES)
def test_bad_transform_value(grouped, info, group, key, value):
    grouped[group]["image_transform_args"][key] = value
    expect(grouped, info, f"{group}.image_transform_args.{key}")


def test_vit_transform_values_are_checked(grouped, info):
    grouped[EDIT]["vit_image_transform_args"]["image_stride"] = 0
    expect(grouped, info, "unified_edit.vit_image_transform_args.image_stride", 0)


def test_frame_sampler_typo_lists_the_allowed_keys(grouped, info):
    grouped[VLM]["frame_sampler_args"] = {"max_num_frame": 8}
    message = expect(grouped, info, "vlm_sft.frame_sampler_args")
    for allowed in ("max_num_frames", "min_num_frames", "sample"):
        assert allowed in message


def test_a_group_that_is_not_a_mapping(grouped, info):
    grouped[T2I] = ["t2i"]
    expect(grouped, info, T2I)


def test_weights_must_sum_above_zero(grouped, info):
    for group in grouped.values():
        group["weight"] = 0.0
    message = expect(grouped, info, "weight")
    assert "sum to more than 0" in message


def test_bools_and_numbers_are_taken_as_given(grouped, info):
    grouped[VLM].update(is_mandatory=False, shuffle_lines=True, shuffle_seed=7, weight=0.25)
    grouped[T2I].update(resume_data_status=False, file_order="filesystem")
    specs = {spec.name: spec for spec in parse_groups(grouped, info, None)}
    assert specs[VLM].is_mandatory is False and specs[VLM].weight == 0.25
    assert specs[VLM].kwargs["shuffle_lines"] is True and specs[VLM].kwargs["shuffle_seed"] == 7
    assert specs[T2I].resume_data_status is False and specs[T2I].kwargs["file_order"] == "filesystem"
