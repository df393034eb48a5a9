"""Packing, dataset-level and run-config values: checked by type and range at construction."""

from __future__ import annotations

import math

import pytest
import yaml

from bagel_data import make_bagel_multimodal_dataset
from bagel_data.errors import ConfigError
from bagel_data.packing.config import PackingConfig
from bagel_data.tools.run import load_run_config

BAD_PACKING = [
    ("max_num_tokens", 0),
    ("max_num_tokens", -8),
    ("max_num_tokens", "36864"),
    ("max_num_tokens", 1.5),
    ("expected_num_tokens", True),
    ("max_num_tokens_per_sample", None),
    ("prefer_buffer_before", -1),
    ("max_buffer_size", -1),
    ("use_flex", "yes"),
    ("interpolate_pos", 1),
    ("text_cond_dropout_prob", 1.5),
    ("vit_cond_dropout_prob", math.nan),
    ("vae_cond_dropout_prob", "0.1"),
    ("vae_image_downsample", 0),
    ("max_latent_size", 0),
    ("vit_patch_size", -14),
    ("max_num_patch_per_side", 70.0),
]


@pytest.mark.parametrize(("key", "value"), BAD_PACKING)
def test_packing_config_checks_each_field(key, value):
    with pytest.raises(ConfigError) as caught:
        PackingConfig(**{key: value})
    assert caught.value.key == key and caught.value.fix


@pytest.mark.parametrize("key", ["max_num_tokens_per_sample", "expected_num_tokens"])
def test_budgets_against_max_num_tokens(key):
    config = PackingConfig(**{key: 50_000})  # each value alone is fine
    with pytest.raises(ConfigError, match="must not exceed max_num_tokens") as caught:
        config.check()
    assert caught.value.key == key
    PackingConfig().check()


def test_defaults_are_valid():
    PackingConfig().check()


BAD_DATASET_ARGS = [
    ("data_seed", "abc", "data_seed"),
    ("data_seed", 4.2, "data_seed"),
    ("strict", "yes", "strict"),
    ("max_consecutive_failures", -1, "max_consecutive_failures"),
    ("world_size", 0, "world_size"),
    ("world_size", "2", "world_size"),
    ("local_rank", -1, "local_rank"),
    ("local_rank", 2, "local_rank"),  # not below world_size=1
    ("num_workers", -1, "num_workers"),
    ("num_workers", "2", "num_workers"),
    ("max_num_tokens", 0, "max_num_tokens"),
]


@pytest.mark.parametrize(("arg", "value", "key"), BAD_DATASET_ARGS)
def test_make_dataset_checks_its_arguments(three_groups, info, tokenizer, special_tokens, arg, value, key):
    kwargs = {**three_groups["packing"], arg: value}
    with pytest.raises(ConfigError) as caught:
        make_bagel_multimodal_dataset(
            tokenizer, special_tokens, three_groups["grouped_datasets"], dataset_info=info, **kwargs
        )
    assert caught.value.key == key
    assert repr(value) in str(caught.value)


def test_world_size_zero_says_what_world_size_is(three_groups, info, tokenizer, special_tokens):
    with pytest.raises(ConfigError, match=r"world_size = 0: must be an integer > 0"):
        make_bagel_multimodal_dataset(
            tokenizer, special_tokens, three_groups["grouped_datasets"], dataset_info=info, world_size=0
        )


@pytest.fixture()
def run_config(three_groups, info, tmp_path):
    def write(**changes):
        config = {"grouped_datasets": three_groups["grouped_datasets"], "dataset_info": info, "packing": {}}
        config.update(changes)
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(config))
        return str(path)

    return write


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"packing": {"data_seed": "abc"}}, "packing.data_seed"),
        ({"packing": {"max_num_tokens": 0}}, "packing.max_num_tokens"),
        ({"packing": {"use_flex": "true"}}, "packing.use_flex"),
        ({"packing": {"max_latnet_size": 64}}, "packing"),
        ({"packing": ["use_flex"]}, "config.packing"),
        ({"grouped_datasets": 5}, "config.grouped_datasets"),
        ({"dataset_info": ["a"]}, "config.dataset_info"),
        ({"pakcing": {}}, "config"),
    ],
)
def test_run_config_values(run_config, changes, key):
    with pytest.raises(ConfigError) as caught:
        load_run_config(run_config(**changes))
    assert caught.value.key == key, str(caught.value)


def test_run_config_accepts_every_documented_packing_key(run_config):
    packing = {"max_latent_size": 64, "data_seed": 7, "strict": True, "max_consecutive_failures": 3}
    config = load_run_config(run_config(packing=packing))
    assert config.packing == packing


def test_a_number_written_as_text_gets_a_hint():
    value = yaml.safe_load("p: 1e-3")["p"]  # YAML 1.1 reads this as a string
    with pytest.raises(ConfigError, match=r"write 1\.0e-3"):
        PackingConfig(text_cond_dropout_prob=value)
    with pytest.raises(ConfigError, match="without quotes"):
        PackingConfig(max_num_tokens="8192")
