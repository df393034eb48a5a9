"""Worker tests under the `spawn` start method (the default on macOS and with CUDA in
some launchers): the dataset, its JSONL index and its checkpoints must cross a fresh
interpreter, and resume must stay exact there."""

from __future__ import annotations

import itertools
import pickle

import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from bagel_data import collate_wrapper, make_bagel_multimodal_dataset
from bagel_data.packing.invariants import check_batch
from helpers.batches import assert_same_batch
from helpers.golden import absolute_dataset_info, load_case

pytestmark = pytest.mark.slow  # each spawned worker imports torch afresh (~2 s)

GROUPS = {
    "t2i_pretrain": {
        "dataset_names": ["t2i"],
        "image_transform_args": {"image_stride": 16, "max_image_size": 128, "min_image_size": 64},
        "is_mandatory": False,
        "num_used_data": [4],
        "weight": 1,
    },
    "vlm_sft": {
        "dataset_names": ["vlm"],
        "image_transform_args": {"image_stride": 14, "max_image_size": 140, "min_image_size": 42, "max_pixels": 15680},
        "frame_sampler_args": {"max_num_frames": 4, "min_num_frames": 2},
        "is_mandatory": False,
        "num_used_data": [1000],
        "weight": 1,
    },
}


def _loader(dataset) -> StatefulDataLoader:
    return StatefulDataLoader(
        dataset,
        batch_size=1,
        num_workers=2,
        collate_fn=collate_wrapper(),
        multiprocessing_context="spawn",
        drop_last=True,
    )


def test_resume_is_exact_with_spawned_workers(golden_root, tokenizer, special_tokens):
    case, _, _ = load_case("packed_three_groups_flex")
    info = absolute_dataset_info(case)

    def build():
        return make_bagel_multimodal_dataset(
            tokenizer=tokenizer,
            special_tokens=special_tokens,
            grouped_datasets=GROUPS,
            dataset_info={name: info[name] for name in GROUPS},
            num_workers=2,
            data_seed=5,
            expected_num_tokens=1400,
            max_num_tokens=1500,
            max_num_tokens_per_sample=900,
            prefer_buffer_before=600,
            max_buffer_size=4,
            use_flex=True,
        )

    total, cut = 5, 2
    dataset = build()
    loader = _loader(dataset)
    stream = iter(loader)
    list(itertools.islice(stream, cut))
    saved = pickle.loads(pickle.dumps(loader.state_dict()))  # as if written to disk
    uninterrupted = list(itertools.islice(stream, total - cut))
    for batch in uninterrupted:
        check_batch(batch.to_dict(), dataset.config, dataset.special_tokens)
    resumed = _loader(build())
    resumed.load_state_dict(saved)
    for i, batch in enumerate(itertools.islice(resumed, total - cut)):
        assert_same_batch(batch, uninterrupted[i], f"batch {cut + i} after the resume")
