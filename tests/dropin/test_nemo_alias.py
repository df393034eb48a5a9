"""`bagel_data.nemo` stands in for `nemo_automodel.components.datasets.multimodal`.

With the NeMo package names aliased in `sys.modules`, code written against NeMo's module,
its tests' `patch(...)` targets included, runs on ours. These tests do what NeMo AutoModel's
`tests/unit_tests/datasets/multimodal/test_bagel_loader.py` does, through the aliased names.
"""

from __future__ import annotations

import importlib
import sys
import types
from unittest.mock import ANY, patch

import pytest
import torch

import bagel_data.nemo

NEMO = "nemo_automodel.components.datasets.multimodal"
SUBMODULES = (
    "collate_fns",
    "datasets",
    "distributed_iterable",
    "interleave",
    "loader",
    "packing",
    "parquet_utils",
    "transforms",
    "utils",
    "video",
)


@pytest.fixture
def nemo_alias(monkeypatch):
    """`sys.modules` as a user aliases it: NeMo's package names point at `bagel_data.nemo`."""
    parents = NEMO.split(".")
    for depth in range(1, len(parents)):
        name = ".".join(parents[:depth])
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, NEMO, bagel_data.nemo)
    for sub in SUBMODULES:
        monkeypatch.setitem(sys.modules, f"{NEMO}.{sub}", importlib.import_module(f"bagel_data.nemo.{sub}"))
    return importlib.import_module(NEMO)


class RecordingPackedDataset(torch.utils.data.IterableDataset):
    """Stands in for the packer: records how `build()` called it."""

    made: list = []  # noqa: RUF012  (a record shared by the instances of one test)

    def __init__(self, **kwargs):
        self.kwargs, self.epochs = kwargs, []
        RecordingPackedDataset.made.append(self)
        kwargs["data_config"].grouped_datasets["group"]["weight"] = 99  # must not reach the caller's config

    def set_epoch(self, seed):
        self.epochs.append(seed)

    def __iter__(self):
        yield {"sample": 1}


def _config(module):
    return module.datasets.BagelDatasetConfig(
        grouped_datasets={"group": {"weight": 1}},
        dataset_info={"group": {"source": {"data_dir": "/tmp"}}},
        data_seed=17,
    )


def test_every_submodule_and_name_of_nemos_module_is_there(nemo_alias):
    for sub in SUBMODULES:
        assert importlib.import_module(f"{NEMO}.{sub}") is getattr(bagel_data.nemo, sub)
    for name in bagel_data.nemo.__all__:
        assert getattr(nemo_alias, name) is getattr(bagel_data, name), name
    assert nemo_alias.packing.DataConfig is nemo_alias.datasets.BagelDatasetConfig


def test_build_through_the_patched_packing_class_is_repeatable_and_leaves_the_config(nemo_alias):
    RecordingPackedDataset.made = []
    config = _config(nemo_alias)
    with patch(f"{NEMO}.packing.PackedDataset", RecordingPackedDataset):
        arguments = dict(tokenizer=object(), special_tokens={}, rank=1, world_size=2, num_workers=3, global_seed=23)
        first, second = config.build(**arguments), config.build(**arguments)
    assert RecordingPackedDataset.made == [first, second]
    assert config.grouped_datasets == {"group": {"weight": 1}}
    assert first.epochs == second.epochs == [17]
    assert first.kwargs["global_seed"] == 23
    assert (first.kwargs["local_rank"], first.kwargs["world_size"], first.kwargs["num_workers"]) == (1, 2, 3)


def test_loader_refuses_batches_of_several_packs(nemo_alias):
    loader_config = nemo_alias.loader.BagelDataloaderConfig(dataset_config=_config(nemo_alias), num_workers=0)
    with pytest.raises(ValueError, match="local_batch_size=1"):
        loader_config.build(tokenizer=object(), special_tokens={}, rank=0, world_size=1, batch_size=2, global_seed=1)


def test_loader_builds_with_the_patched_collate_and_iterates(nemo_alias):
    config = nemo_alias.loader.BagelDataloaderConfig(
        dataset_config=_config(nemo_alias), num_workers=0, pin_memory=False
    )
    dataset = RecordingPackedDataset(data_config=_config(nemo_alias))
    with (
        patch.object(config.dataset_config, "build", return_value=dataset) as build_dataset,
        patch(f"{NEMO}.loader.bagel_packed_collate_fn", new=lambda batch: batch[0]),
    ):
        result = config.build(
            tokenizer=object(),
            special_tokens={"image_start_token": 1},
            rank=0,
            world_size=1,
            batch_size=1,
            global_seed=5,
        )
        assert next(iter(result.dataloader)) == {"sample": 1}
    assert result.dataset is dataset
    build_dataset.assert_called_once_with(
        tokenizer=ANY, special_tokens={"image_start_token": 1}, rank=0, world_size=1, num_workers=0, global_seed=5
    )


def test_a_recipes_sections_fill_the_two_configs(nemo_alias):
    """NeMo's recipe hands its `dataset:` section to BagelDatasetConfig and its `dataloader:`
    section to BagelDataloaderConfig."""
    dataset_section = {
        "grouped_datasets": {"group": {"weight": 1}},
        "dataset_info": {"group": {"source": {"data_dir": "/tmp"}}},
        "expected_num_tokens": 128,
        "data_seed": 9,
    }
    config = nemo_alias.loader.BagelDataloaderConfig(
        nemo_alias.datasets.BagelDatasetConfig(**dataset_section), num_workers=2, pin_memory=False, prefetch_factor=4
    )
    assert (config.dataset_config.expected_num_tokens, config.dataset_config.data_seed) == (128, 9)
    assert (config.num_workers, config.pin_memory, config.prefetch_factor) == (2, False, 4)


def test_the_loader_keeps_the_worker_count_guard(nemo_alias):
    from bagel_data.errors import ResumeError

    config = nemo_alias.loader.BagelDataloaderConfig(
        dataset_config=_config(nemo_alias), num_workers=0, pin_memory=False
    )
    with patch.object(
        config.dataset_config, "build", return_value=RecordingPackedDataset(data_config=_config(nemo_alias))
    ):
        loader = config.build(tokenizer=object(), special_tokens={}, rank=0, world_size=1, batch_size=1, global_seed=5)
    saved = {"_snapshot": {"_main_snapshot": {"_num_workers": 2}}}
    with pytest.raises(ResumeError, match="num_workers=2"):
        loader.dataloader.load_state_dict(saved)
