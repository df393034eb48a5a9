"""BAGEL's `data_status` on a group of several `data_dir`s (one folder per dataset name):
a position read from a batch's `batch_data_indexes` resumes the group right after that
sample, in either folder, in both modes (the reference's file list runs over the folders
in order; the default mode's position names its own units)."""

from __future__ import annotations

import itertools

import pytest

from bagel_data import make_bagel_multimodal_dataset
from helpers.builders import solid_jpeg, write_t2i

GROUP = {
    "t2i_pretrain": {
        "dataset_names": ["first", "second"],
        "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32},
        "num_used_data": [2, 2],
        "weight": 1,
    }
}
PACKING = dict(expected_num_tokens=60, max_num_tokens=100, max_num_tokens_per_sample=90, prefer_buffer_before=10)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    roots = []
    for k, sizes in enumerate([[[2, 1], [3]], [[1], [2, 2]]]):  # per file, its row groups' sizes
        root = tmp_path_factory.mktemp(f"dir{k}")
        rows = iter(range(100))
        files = [
            [[{"image": solid_jpeg(48, 32, (k * 90, next(rows) * 20 % 250, 60)), "captions": {"c": "x"}}] * size
             for size in file]
            for file in sizes
        ]  # fmt: skip
        write_t2i(root, files)
        roots.append(str(root))
    return roots


def _build(folders, tokenizer, special_tokens, compat, data_status=None):
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=GROUP,
        dataset_info={"t2i_pretrain": {"first": {"data_dir": folders[0]}, "second": {"data_dir": folders[1]}}},
        num_workers=1,
        data_status=data_status,
        compat=compat,
        **PACKING,
    )


@pytest.mark.parametrize("compat", [None, "bagel"])
def test_each_position_of_a_pass_resumes_right_after_it(folders, tokenizer, special_tokens, compat):
    family = _build(folders, tokenizer, special_tokens, compat).grouped_datasets[0]
    stream = family.iter_samples(after=family.resume_cursor(0))
    positions = [sample["data_indexes"]["data_indexes"] for _, sample in itertools.islice(stream, 11)]
    assert len(positions) == 11  # the pass's 11 rows, over both folders
    if compat == "bagel":  # the reference's [file, row group, row] over the folders' files in order
        assert max(position[0] for position in positions) == 3
    for here, following in itertools.pairwise(positions):
        resumed = _build(folders, tokenizer, special_tokens, compat, {"t2i_pretrain": [here]}).grouped_datasets[0]
        _, first = next(resumed.iter_samples(after=resumed.resume_cursor(0)))
        assert first["data_indexes"]["data_indexes"] == following, f"resumed after {here}"
