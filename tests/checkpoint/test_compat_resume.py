"""Exact resume in compat="bagel": the shared reference-seeded stream and the buffered
samples (rebuilt from the stream state before their rows) continue as if never stopped."""

from __future__ import annotations

import itertools
import pickle

import pytest
import torch

from bagel_data import ResumeError, build_dataloader, make_bagel_multimodal_dataset
from helpers.batches import assert_same_batch
from helpers.golden import absolute_dataset_info, load_case

GROUPS = {
    "t2i_pretrain": {
        "dataset_names": ["t2i"],
        "image_transform_args": {"image_stride": 16, "max_image_size": 128, "min_image_size": 64},
        "is_mandatory": True,
        "num_used_data": [4],
        "weight": 2,
    },
    "unified_edit": {
        "dataset_names": ["edit"],
        "image_transform_args": {"image_stride": 16, "max_image_size": 128, "min_image_size": 64},
        "vit_image_transform_args": {"image_stride": 14, "max_image_size": 112, "min_image_size": 56},
        "is_mandatory": False,
        "num_used_data": [2],
        "weight": 1,
    },
    "vlm_sft": {
        "dataset_names": ["vlm"],
        "image_transform_args": {"image_stride": 14, "max_image_size": 140, "min_image_size": 42, "max_pixels": 15680},
        "frame_sampler_args": {"max_num_frames": 3, "min_num_frames": 2},
        "is_mandatory": False,
        "num_used_data": [1000],
        "weight": 1,
    },
}
PACKING = dict(
    expected_num_tokens=1490,
    max_num_tokens=1500,
    max_num_tokens_per_sample=900,
    prefer_buffer_before=600,
    max_buffer_size=2,
    text_cond_dropout_prob=0.3,
    vit_cond_dropout_prob=0.4,
    vae_cond_dropout_prob=0.3,
)


@pytest.fixture(scope="module")
def dataset_info(golden_root):
    case, _, _ = load_case("packed_three_groups_flex")
    return absolute_dataset_info(case)


def make(dataset_info, tokenizer, special_tokens, num_workers):
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=GROUPS,
        dataset_info=dataset_info,
        num_workers=max(num_workers, 1),
        data_seed=7,
        compat="bagel",
        compat_seed=11,
        **PACKING,
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_compat_restore_gives_the_uninterrupted_stream(dataset_info, tokenizer, special_tokens, num_workers):
    total, cuts = 10, [3, 7]

    def loader():
        # The workers' base seed comes from torch's generator, as in the reference's loader;
        # seeding it here makes the uninterrupted and the first runs the same stream.
        torch.manual_seed(0)
        return build_dataloader(make(dataset_info, tokenizer, special_tokens, num_workers), num_workers=num_workers)

    reference = list(itertools.islice(loader(), total))
    buffered = False
    for cut in cuts:
        first = loader()
        consumed = list(itertools.islice(first, cut))
        for i, batch in enumerate(consumed):
            assert_same_batch(batch, reference[i], f"before cut {cut}, batch {i}")
        checkpoint = pickle.loads(pickle.dumps(first.state_dict()))
        del first
        buffered |= "buffer': [{" in repr(checkpoint)
        restored = loader()
        restored.load_state_dict(checkpoint)
        for i, batch in enumerate(itertools.islice(restored, total - cut)):
            assert_same_batch(batch, reference[cut + i], f"cut {cut}, batch {cut + i}")
    assert buffered, "no cut point had a buffered sample"


def test_default_checkpoint_does_not_load_in_compat(dataset_info, tokenizer, special_tokens):
    default = make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=GROUPS,
        dataset_info=dataset_info,
        num_workers=1,
        data_seed=7,
        **PACKING,
    )
    next(iter(default))
    compat = make(dataset_info, tokenizer, special_tokens, 0)
    compat.load_state_dict(default.state_dict())
    with pytest.raises(ResumeError, match="compat"):
        next(iter(compat))


def test_elastic_restart_is_refused_in_compat(dataset_info, tokenizer, special_tokens):
    compat = make(dataset_info, tokenizer, special_tokens, 0)
    with pytest.raises(ResumeError, match="compat"):
        compat.load_elastic_state([])


def test_compat_seed_defaults_to_data_seed_in_the_main_process(dataset_info, tokenizer, special_tokens):
    """Without `compat_seed` the main process's reference-order generators are seeded with
    `data_seed`: the same stream as passing it explicitly, and the same on every build."""

    def first_batches(**seed):
        dataset = make_bagel_multimodal_dataset(
            tokenizer=tokenizer, special_tokens=special_tokens, grouped_datasets=GROUPS,
            dataset_info=dataset_info, num_workers=1, data_seed=7, compat="bagel", **seed, **PACKING,
        )  # fmt: skip
        return [batch["packed_timesteps"] for batch in itertools.islice(iter(dataset), 3)]

    def same(xs, ys):
        return len(xs) == len(ys) and all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(xs, ys))

    default = first_batches()
    assert same(default, first_batches())
    assert same(default, first_batches(compat_seed=7))
    assert not same(default, first_batches(compat_seed=8))
