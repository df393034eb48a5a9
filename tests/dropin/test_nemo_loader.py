"""What NeMo AutoModel's `test_bagel_loader.py` checks, against our classes, plus the same
config driven end to end on real data (its recipe's `dataset:` / `dataloader:` sections)."""

from __future__ import annotations

import itertools
import json
import random
from typing import ClassVar
from unittest.mock import ANY, patch

import numpy as np
import pytest
import torch
import yaml

from bagel_data import BagelDatasetConfig, ConfigError, SimpleCustomBatch
from bagel_data.nemo.loader import BagelDataloaderBuild, BagelDataloaderConfig
from bagel_data.packing.invariants import check_batch
from helpers.golden import absolute_dataset_info, load_case


class FakePackedDataset(torch.utils.data.IterableDataset):
    builds: ClassVar[list] = []

    def __init__(self, **kwargs):  # keywords only: build() must pass them by name
        self.kwargs = kwargs
        self.epochs = []
        FakePackedDataset.builds.append(self)
        kwargs["data_config"].grouped_datasets["group"]["weight"] = 99  # would leak if aliased

    def set_epoch(self, seed):
        self.epochs.append(seed)

    def __iter__(self):
        yield {"sample": 1}


def _config() -> BagelDatasetConfig:
    return BagelDatasetConfig(
        grouped_datasets={"group": {"weight": 1}},
        dataset_info={"group": {"source": {"data_dir": "/tmp"}}},
        data_seed=17,
    )


def test_build_is_repeatable_and_leaves_the_config_alone():
    config = _config()
    with patch("bagel_data.nemo.packing.PackedDataset", FakePackedDataset):
        kwargs = dict(tokenizer=object(), special_tokens={}, rank=1, world_size=2, num_workers=3, global_seed=23)
        first, second = config.build(**kwargs), config.build(**kwargs)
    assert config.grouped_datasets == {"group": {"weight": 1}}
    assert first is not second
    assert first.epochs == [17] and second.epochs == [17]
    assert first.kwargs["global_seed"] == 23
    assert (first.kwargs["local_rank"], first.kwargs["world_size"], first.kwargs["num_workers"]) == (1, 2, 3)


def test_batch_size_other_than_one_is_refused_before_building():
    loader_config = BagelDataloaderConfig(dataset_config=_config(), num_workers=0)
    with patch.object(loader_config.dataset_config, "build") as build_dataset:
        with pytest.raises(ValueError, match="local_batch_size=1"):
            loader_config.build(
                tokenizer=object(), special_tokens={}, rank=0, world_size=1, batch_size=2, global_seed=1
            )
    build_dataset.assert_not_called()


def test_builds_and_iterates_on_cpu():
    loader_config = BagelDataloaderConfig(dataset_config=_config(), num_workers=0, pin_memory=False)
    dataset = FakePackedDataset(data_config=_config())
    with (
        patch.object(loader_config.dataset_config, "build", return_value=dataset) as build_dataset,
        patch("bagel_data.nemo.loader.bagel_packed_collate_fn", new=lambda batch: batch[0]),
    ):
        result = loader_config.build(
            tokenizer=object(),
            special_tokens={"image_start_token": 1},
            rank=0,
            world_size=1,
            batch_size=1,
            global_seed=5,
        )
        assert next(iter(result.dataloader)) == {"sample": 1}
    assert isinstance(result, BagelDataloaderBuild)
    assert result.dataset is dataset
    build_dataset.assert_called_once_with(
        tokenizer=ANY, special_tokens={"image_start_token": 1}, rank=0, world_size=1, num_workers=0, global_seed=5
    )


def test_recipe_sections_map_onto_the_two_configs():
    recipe = {
        "dataset": {
            "grouped_datasets": {"group": {"weight": 1}},
            "dataset_info": {"group": {"source": {"data_dir": "/tmp"}}},
            "expected_num_tokens": 128,
            "data_seed": 9,
        },
        "dataloader": {"num_workers": 2, "pin_memory": False, "prefetch_factor": 4},
    }
    loader_config = BagelDataloaderConfig(BagelDatasetConfig(**recipe["dataset"]), **recipe["dataloader"])
    assert loader_config.dataset_config.expected_num_tokens == 128
    assert loader_config.dataset_config.data_seed == 9
    assert (loader_config.num_workers, loader_config.pin_memory, loader_config.prefetch_factor) == (2, False, 4)


# -- the same configs on real data -------------------------------------------------------------
@pytest.fixture(scope="module")
def recipe_files(tmp_path_factory):
    """NeMo's example `dataset:` section, written as *_path files (YAML groups, JSON info)."""
    case, _, _ = load_case("packed_three_groups_flex")
    folder = tmp_path_factory.mktemp("recipe")
    grouped = {name: dict(args) for name, args in case["grouped_datasets"].items()}
    for name, args in grouped.items():
        args["weight"], args["is_mandatory"] = 1, name == "t2i_pretrain"
    (folder / "grouped.yaml").write_text(yaml.safe_dump(grouped))
    (folder / "info.json").write_text(json.dumps(absolute_dataset_info(case)))
    return folder, case["packing"]


def _real_config(recipe_files, **changes) -> BagelDatasetConfig:
    folder, packing = recipe_files
    return BagelDatasetConfig(
        grouped_datasets_path=str(folder / "grouped.yaml"),
        dataset_info_path=str(folder / "info.json"),
        **{**packing, "use_flex": True, "data_seed": 7, **changes},
    )


def _rng_states():
    return random.getstate(), np.random.get_state()[1].tobytes(), torch.get_rng_state().numpy().tobytes()


def test_real_build_packs_valid_batches_and_leaves_global_rngs_alone(recipe_files, tokenizer, special_tokens):
    loader_config = BagelDataloaderConfig(_real_config(recipe_files), num_workers=0, pin_memory=False)
    before = _rng_states()
    build = loader_config.build(
        tokenizer=tokenizer, special_tokens=special_tokens, rank=0, world_size=1, batch_size=1, global_seed=4396
    )
    batches = list(itertools.islice(build.dataloader, 3))
    assert _rng_states() == before
    assert build.dataset.data_seed == 7 and build.dataset.global_seed == 4396
    for batch in batches:
        assert isinstance(batch, SimpleCustomBatch)
        check_batch(batch.to_dict(), build.dataset.config, build.dataset.special_tokens)
    assert build.dataset.config.use_flex and build.dataset.config.max_num_tokens == recipe_files[1]["max_num_tokens"]


def _group_choices(dataset_config, tokenizer, special_tokens, global_seed, count=4):
    dataset = dataset_config.build(
        tokenizer=tokenizer, special_tokens=special_tokens, rank=0, world_size=1, num_workers=0, global_seed=global_seed
    )
    return [
        [(d["dataset_name"], d["data_indexes"]) for d in b["batch_data_indexes"]]
        for b in itertools.islice(dataset, count)
    ]


def test_global_seed_changes_the_packer_stream_only(recipe_files, tokenizer, special_tokens):
    config = _real_config(recipe_files)
    first = _group_choices(config, tokenizer, special_tokens, global_seed=1)
    assert first == _group_choices(config, tokenizer, special_tokens, global_seed=1)
    assert first != _group_choices(config, tokenizer, special_tokens, global_seed=2)
    # All 64 bits count: seeds that differ only above bit 31 draw differently too.
    assert first != _group_choices(config, tokenizer, special_tokens, global_seed=1 + 2**32)


def test_missing_mapping_and_bad_compat_are_config_errors():
    with pytest.raises(ConfigError, match="grouped_datasets or grouped_datasets_path"):
        BagelDatasetConfig(dataset_info={}).build(
            tokenizer=None, special_tokens={}, rank=0, world_size=1, num_workers=0, global_seed=None
        )
    with pytest.raises(ConfigError, match="compat"):
        BagelDatasetConfig(grouped_datasets={}, compat="nemo")


def test_a_weight_schedule_reaches_the_dataset_through_bagel_dataset_config(recipe_files, tokenizer, special_tokens):
    folder, packing = recipe_files
    grouped = yaml.safe_load((folder / "grouped.yaml").read_text())
    grouped["vlm_sft"]["weight"] = [[0, 1.0], [2, 0.0]]
    grouped["unified_edit"]["weight"] = [[0, 0.0], [2, 1.0]]
    config = BagelDatasetConfig(
        grouped_datasets=grouped, dataset_info_path=str(folder / "info.json"), **{**packing, "use_flex": True}
    )
    dataset = config.build(
        tokenizer=tokenizer, special_tokens=special_tokens, rank=0, world_size=1, num_workers=0, global_seed=None
    )
    stream = iter(dataset)
    first = [{d["dataset_name"] for d in next(stream)["batch_data_indexes"]} for _ in range(2)]
    assert all("unified_edit" not in step for step in first), first  # weight 0 before step 2
    vlm_cursor = dataset.state_dict()["stages"]["draw"]["cursors"]["vlm_sft"]
    later = [{d["dataset_name"] for d in next(stream)["batch_data_indexes"]} for _ in range(3)]
    assert any("unified_edit" in step for step in later), later
    # Weight 0 from step 2 on: no vlm sample is drawn (those already buffered may still be packed).
    assert dataset.state_dict()["stages"]["draw"]["cursors"]["vlm_sft"] == vlm_cursor
    grouped["vlm_sft"]["weight"] = [[0, 1.0], [0, 2.0]]
    with pytest.raises(ConfigError, match="vlm_sft.weight"):
        BagelDatasetConfig(grouped_datasets=grouped, dataset_info_path=str(folder / "info.json")).build(
            tokenizer=tokenizer, special_tokens=special_tokens, rank=0, world_size=1, num_workers=0, global_seed=None
        )


def test_the_loader_generator_is_seeded_by_global_seed_rank_and_data_seed():
    """Each of the three changes the worker base seeds; no global_seed counts as 0, and a
    dataset without a data_seed as data_seed 0."""
    from types import SimpleNamespace

    from bagel_data.nemo.loader import _loader_generator

    def draws(global_seed, rank, dataset) -> tuple:
        return tuple(torch.randint(2**62, (4,), generator=_loader_generator(global_seed, rank, dataset)).tolist())

    def seeded(data_seed):
        return SimpleNamespace(data_seed=data_seed)

    base = draws(0, 0, seeded(0))
    assert draws(None, 0, seeded(0)) == base and draws(0, 0, object()) == base and draws(None, 0, object()) == base
    others = [draws(7, 0, seeded(0)), draws(0, 1, seeded(0)), draws(0, 0, seeded(7)), draws(None, 0, seeded(7))]
    assert len({base, *others[:3]}) == 4 and others[3] == others[2]
    assert draws(7, 3, seeded(5)) == draws(7, 3, seeded(5))  # a function of the three, not of the global stream
    # two independent 32-bit words make the 64-bit seed (not one word twice)
    seeds = [_loader_generator(g, r, seeded(d)).initial_seed() for g, r, d in [(0, 0, 0), (7, 3, 5), (1, 0, 2)]]
    assert all(0 <= s < 2**64 for s in seeds) and all(s >> 32 != s & 0xFFFFFFFF for s in seeds)


@pytest.mark.parametrize("num_workers, prefetch", [(1, 4), (2, 3), (0, None)])
def test_the_loader_takes_the_configs_workers_and_prefetch_factor(num_workers, prefetch):
    """prefetch_factor reaches the DataLoader whenever it has workers (it has none without);
    memory is pinned as configured, one pack per batch."""
    loader_config = BagelDataloaderConfig(
        dataset_config=_config(), num_workers=num_workers, pin_memory=False, prefetch_factor=prefetch or 5
    )
    dataset = FakePackedDataset(data_config=_config())
    with patch.object(loader_config.dataset_config, "build", return_value=dataset):
        loader = loader_config.build(
            tokenizer=object(), special_tokens={}, rank=0, world_size=1, batch_size=1, global_seed=5
        ).dataloader
    assert (loader.num_workers, loader.prefetch_factor, loader.pin_memory) == (num_workers, prefetch, False)
    assert loader.batch_size == 1
