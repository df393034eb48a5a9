"""Every `stream_*` golden case: the first samples one family yields, through the public classes."""

from __future__ import annotations

import itertools

import pytest

from bagel_data.config import load_mapping, parse_group
from helpers.golden import (
    absolute_dataset_info,
    as_worker,
    case_runs,
    check_tensor,
    load_case,
    reference_file_order,
    skip_without_requirement,
)


def build_family(case: dict, tokenizer, compat=None):
    """The case's family; with compat="bagel" the listing order needs no help (it is implied)."""
    info, _ = load_mapping(absolute_dataset_info(case), "dataset_info")
    group = case["group"]
    args = dict(case["grouped_datasets"][group])
    if compat is None:
        args.update(reference_file_order(case))
    spec = parse_group(group, args, info, None)
    dataset = spec.family(
        dataset_name=group,
        tokenizer=tokenizer,
        local_rank=case["rank"],
        world_size=case["world_size"],
        num_workers=case["num_workers"],
        data_status=case["data_status"],
        **spec.kwargs,
        compat=compat,
    )
    dataset.set_epoch(case["data_seed"])
    return dataset


@pytest.mark.parametrize(("name", "compat"), case_runs("stream"))
def test_stream_case(name, compat, tokenizer):
    case, expected, arrays = load_case(name)
    skip_without_requirement(case)
    assert case.get("compat") == (compat if name.startswith("compat_") else None)
    dataset = build_family(case, tokenizer, compat)
    with as_worker(case["worker_id"], case["num_workers"]):
        samples = list(itertools.islice(iter(dataset), case["count"]))
    assert len(samples) == len(expected["samples"])
    # Samples whose pixels the reference itself does not reproduce (the case says why):
    # their images are compared by shape only.
    unstable = set(case.get("pixels_unstable", {}).get("samples", ()))
    for index, (got, want) in enumerate(zip(samples, expected["samples"])):
        where = f"sample {index}"
        assert got["data_indexes"] == want["data_indexes"], where
        assert got["sequence_plan"] == want["sequence_plan"], where
        assert got["num_tokens"] == want["num_tokens"], where
        if "text_ids_list" in want:
            assert got["text_ids_list"] == want["text_ids_list"], where
        assert len(got["image_tensor_list"]) == len(want["images"]), where
        for j, (tensor, summary) in enumerate(zip(got["image_tensor_list"], want["images"])):
            if index in unstable:
                assert list(tensor.shape) == list(summary["shape"]), f"{where} image {j}"
                continue
            key = f"s{index}_img{j}"
            reference = arrays[key] if arrays is not None and key in arrays else None
            check_tensor(f"{where} image {j}", tensor, summary, reference)
