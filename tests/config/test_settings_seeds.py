"""Seeds, budgets and strides are checked in `Settings`, so every door refuses the same values
at construction, naming the key, the value and the fix (not numpy, deep in the first pack)."""

from __future__ import annotations

import itertools
import json
import pickle
import types

import numpy as np
import pytest
import torch

from bagel_data import make_bagel_multimodal_dataset
from bagel_data.errors import ConfigError
from bagel_data.schema.settings import MAX_FLEX_TOKENS, SEED_LIMIT, Settings
from helpers.batches import assert_same_batch
from helpers.doors import DOORS, build_through
from helpers.three_groups import three_groups_config, three_groups_info

PACKING = dict(
    expected_num_tokens=1490,
    max_num_tokens=1500,
    max_num_tokens_per_sample=900,
    prefer_buffer_before=600,
    max_buffer_size=4,
)


@pytest.fixture(scope="module")
def info(golden_root):
    return three_groups_info()


def build(door, info, tokenizer, special_tokens, grouped=None, **settings):
    return build_through(
        door,
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped=grouped or three_groups_config(),
        info=info,
        settings={**PACKING, **settings},
    )


BAD = [
    ({"compat": "bagel", "compat_seed": -5}, "compat_seed", "between 0 and 2\\*\\*32 - 1"),
    ({"compat": "bagel", "compat_seed": 2**70}, "compat_seed", "between 0 and 2\\*\\*32 - 1"),
    ({"compat": "bagel", "data_seed": -1}, "data_seed", 'with compat="bagel" it must be between 0'),
    ({"compat": "bagel", "data_seed": SEED_LIMIT + 1}, "data_seed", "the default mode, which takes any integer"),
    ({"max_num_tokens": 2**63, "use_flex": True}, "max_num_tokens", f"at most {MAX_FLEX_TOKENS}"),
]


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(("settings", "key", "fix"), BAD)
def test_out_of_range_seeds_and_budgets_are_refused_at_every_door(
    info, tokenizer, special_tokens, door, settings, key, fix
):
    with pytest.raises(ConfigError, match=fix) as caught:
        build(door, info, tokenizer, special_tokens, **settings)
    assert caught.value.key == key and caught.value.value == settings[key]


def test_the_seed_and_flex_bounds_are_inclusive():
    Settings(compat="bagel", data_seed=0, compat_seed=SEED_LIMIT)
    Settings(compat="bagel", data_seed=SEED_LIMIT, compat_seed=0)
    Settings(use_flex=True, max_num_tokens=MAX_FLEX_TOKENS)
    Settings(use_flex=False, max_num_tokens=2**63)  # no padding: only a cap
    with pytest.raises(ConfigError, match="max_num_tokens"):
        Settings(use_flex=True, max_num_tokens=MAX_FLEX_TOKENS + 1)
    assert Settings(data_seed=-1).data_seed == -1 and Settings(data_seed=2**70).data_seed == 2**70


@pytest.mark.parametrize("door", DOORS)
def test_a_numpy_integer_seed_is_taken_as_an_int(info, tokenizer, special_tokens, door):
    dataset = build(door, info, tokenizer, special_tokens, data_seed=np.int64(7))
    assert type(dataset.data_seed) is int and type(dataset.config.data_seed) is int
    first = next(iter(dataset))
    plain = next(iter(build(door, info, tokenizer, special_tokens, data_seed=7)))
    assert torch.equal(first["packed_text_ids"], plain["packed_text_ids"])
    json.dumps(dataset.state_dict())  # a checkpoint holds a plain int, as JSON writes it


def test_set_epoch_checks_the_seed_too(info, tokenizer, special_tokens):
    dataset = build("make_bagel_multimodal_dataset", info, tokenizer, special_tokens, compat="bagel")
    with pytest.raises(ConfigError, match="data_seed"):
        dataset.set_epoch(-1)


def stride(value, max_size=128, min_size=64):
    return {"image_stride": value, "max_image_size": max_size, "min_image_size": min_size}


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(
    ("changes", "setting", "value", "bad"),
    [  # each time every other transform's stride fits: the one named is the one checked
        ({"unified_edit": {"vit_image_transform_args": stride(32)}}, "vit_patch_size", 16, "vlm_sft.image_transform_args.image_stride=14"),
        ({}, "vit_patch_size", 16, "unified_edit.vit_image_transform_args.image_stride=14"),
        ({}, "vae_image_downsample", 32, "t2i_pretrain.image_transform_args.image_stride=16"),
        ({"t2i_pretrain": {"image_transform_args": stride(32)}}, "vae_image_downsample", 32, "unified_edit.image_transform_args.image_stride=16"),
    ],
)  # fmt: skip
def test_a_size_that_does_not_divide_the_transforms_stride_is_refused(
    info, tokenizer, special_tokens, door, changes, setting, value, bad
):
    grouped = three_groups_config(**changes)
    with pytest.raises(ConfigError, match=rf"{bad.replace('.', '[.]')} is not a multiple of it") as caught:
        build(door, info, tokenizer, special_tokens, grouped, **{setting: value, "interpolate_pos": True})
    assert caught.value.key == setting and caught.value.value == value


def test_a_stride_that_is_a_multiple_of_the_size_is_accepted(info, tokenizer, special_tokens):
    dataset = build("make_bagel_multimodal_dataset", info, tokenizer, special_tokens, vae_image_downsample=8)
    assert dataset.config.vae_image_downsample == 8


def packs(info, tokenizer, special_tokens, count, state=None, **settings):
    dataset = make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=three_groups_config(vlm_sft={"shuffle_lines": True}),
        dataset_info=info,
        num_workers=1,
        text_cond_dropout_prob=0.5,
        **PACKING,
        **settings,
    )
    if state is not None:
        dataset.load_state_dict(state)
    stream = iter(dataset)
    got = [next(stream) for _ in range(count)]
    return got, pickle.loads(pickle.dumps(dataset.state_dict()))


def same(a, b) -> bool:
    try:
        assert_same_batch(*(types.SimpleNamespace(to_dict=lambda pack=pack: pack) for pack in (a, b)), "")
    except AssertionError:
        return False
    return True


def test_a_run_with_a_negative_data_seed_resumes_exactly(info, tokenizer, special_tokens):
    whole, _ = packs(info, tokenizer, special_tokens, 5, data_seed=-3)
    head, state = packs(info, tokenizer, special_tokens, 2, data_seed=-3)
    assert state["data_seed"] == -3
    tail, _ = packs(info, tokenizer, special_tokens, 3, state=state, data_seed=-3)
    assert all(same(a, b) for a, b in zip(whole, head + tail))
    other, _ = packs(info, tokenizer, special_tokens, 5, data_seed=3)
    assert not all(same(a, b) for a, b in zip(whole, other))  # the sign is not dropped


def test_compat_seed_zero_is_a_seed_not_unset(info, tokenizer, special_tokens):
    def timesteps(**seeds):
        got, _ = packs(info, tokenizer, special_tokens, 3, compat="bagel", data_seed=7, **seeds)
        return [pack["packed_timesteps"] for pack in got]

    def equal(xs, ys):
        return all(a.shape == b.shape and torch.equal(a, b) for a, b in itertools.zip_longest(xs, ys))

    zero = timesteps(compat_seed=0)
    assert equal(zero, timesteps(compat_seed=0))
    assert not equal(zero, timesteps())  # unset: data_seed=7
