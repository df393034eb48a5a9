"""Restoring a loader checkpoint with another worker count says what to do (not a bare
AssertionError from inside torchdata)."""

from __future__ import annotations

import itertools

import pytest

from bagel_data import ResumeError, build_dataloader, make_bagel_multimodal_dataset
from helpers.builders import solid_jpeg, write_t2i

GROUPED = {
    "t2i_pretrain": {
        "dataset_names": ["t2i"],
        "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 16},
        "num_used_data": [2],
        "weight": 1,
    }
}


def build(root, tokenizer, special_tokens, num_workers: int):
    info = {"t2i_pretrain": {"t2i": {"data_dir": str(root)}}}
    return make_bagel_multimodal_dataset(
        tokenizer, special_tokens, GROUPED, dataset_info=info, local_rank=0, world_size=1,
        num_workers=max(num_workers, 1), expected_num_tokens=64, max_num_tokens=256,
        max_num_tokens_per_sample=128, prefer_buffer_before=64,
    )  # fmt: skip


@pytest.mark.parametrize(("saved", "restored"), [(0, 2), (1, 2)])
def test_a_different_worker_count_is_a_resume_error_pointing_to_elastic_restarts(
    tmp_path, tokenizer, special_tokens, saved, restored
):
    rows = [{"image": solid_jpeg(48, 32), "captions": {"c": f"caption {i}"}} for i in range(4)]
    write_t2i(tmp_path, [[rows], [rows]])
    loader = build_dataloader(build(tmp_path, tokenizer, special_tokens, saved), num_workers=saved)
    list(itertools.islice(loader, 2))
    state = loader.state_dict()
    fresh = build_dataloader(build(tmp_path, tokenizer, special_tokens, restored), num_workers=restored)
    with pytest.raises(ResumeError, match=rf"num_workers={saved}.*num_workers={restored}.*docs/elastic.md"):
        fresh.load_state_dict(state)
