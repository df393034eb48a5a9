"""Which source wins: `dataset_info_path` over the config's `dataset_info` mapping, an
explicit `dataset_info=` argument over both; and a group with `resume_data_status: false`
starts afresh whatever `data_status` says."""

from __future__ import annotations

import json

import pytest

from bagel_data import BagelDatasetConfig, DataConfig, PackedDataset, make_bagel_multimodal_dataset
from bagel_data.errors import ConfigError
from helpers.three_groups import three_groups_config, three_groups_info

PACKING = dict(expected_num_tokens=1490, max_num_tokens=1500, max_num_tokens_per_sample=900, prefer_buffer_before=600)


@pytest.fixture(scope="module")
def infos(golden_root, tmp_path_factory):
    """(a file of the real dataset_info, a mapping whose folders do not exist)."""
    real = three_groups_info()
    path = tmp_path_factory.mktemp("info") / "dataset_info.json"
    path.write_text(json.dumps(real))
    bogus = {group: {name: {**entry, "data_dir": "/nonexistent/bagel"} for name, entry in datasets.items()}
             for group, datasets in real.items()}  # fmt: skip
    return str(path), bogus


def first_indexes(dataset):
    return [(w["dataset_name"], w["data_indexes"]) for w in next(iter(dataset))["batch_data_indexes"]]


def build_config(**sources):
    return BagelDatasetConfig(grouped_datasets=three_groups_config(), data_seed=3, **sources, **PACKING)


def test_dataset_info_path_wins_over_the_mapping_in_bagel_dataset_config(infos, tokenizer, special_tokens):
    path, bogus = infos
    kwargs = dict(
        tokenizer=tokenizer, special_tokens=special_tokens, rank=0, world_size=1, num_workers=1, global_seed=None
    )
    with pytest.raises(ConfigError, match="nonexistent"):
        build_config(dataset_info=bogus).build(**kwargs)
    dataset = build_config(dataset_info=bogus, dataset_info_path=path).build(**kwargs)
    assert first_indexes(dataset) == first_indexes(build_config(dataset_info_path=path).build(**kwargs))


def test_an_explicit_dataset_info_wins_over_the_data_configs(infos, tokenizer, special_tokens):
    path, bogus = infos
    config = DataConfig(three_groups_config(), dataset_info_path="/nonexistent/info.json", dataset_info=bogus)
    dataset = PackedDataset(
        config, tokenizer, special_tokens, **PACKING, local_rank=0, world_size=1, num_workers=1, dataset_info=path
    )
    dataset.set_epoch(3)
    config = DataConfig(three_groups_config(), dataset_info=bogus, dataset_info_path=path)
    from_path = PackedDataset(
        config, tokenizer, special_tokens, **PACKING, local_rank=0, world_size=1, num_workers=1
    )  # the path, not the mapping
    from_path.set_epoch(3)
    assert first_indexes(dataset) == first_indexes(from_path)


def test_a_group_with_resume_data_status_false_starts_afresh(infos, tokenizer, special_tokens):
    path, _ = infos

    def make(data_status=None, resume=True):
        changes = {group: {"resume_data_status": resume} for group in ("t2i_pretrain", "unified_edit", "vlm_sft")}
        return make_bagel_multimodal_dataset(
            tokenizer, special_tokens, three_groups_config(**changes), num_workers=1, data_seed=3,
            data_status=data_status, dataset_info=path, **PACKING,
        )  # fmt: skip

    fresh = first_indexes(make())
    status = {}
    for group, position in fresh:
        status[group] = [position]
    assert first_indexes(make(status, resume=False)) == fresh
    assert first_indexes(make(status, resume=True)) != fresh  # the status does move a group that resumes
