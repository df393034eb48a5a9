"""The example configs are valid with the settings they are shown with.

`configs/example.yaml` and the example of docs/formats/grouped_datasets.md use BAGEL's
1024-pixel VAE transforms, which need `max_latent_size=64` (the pages say so); they are built
here against the demo dataset, under the example's own group and dataset names.
"""

from __future__ import annotations

import re

import pytest
import yaml

from bagel_data import ConfigError, make_bagel_multimodal_dataset
from helpers.doc_blocks import REPO

DEMO_NAMES = {"t2i_pretrain": "t2i", "unified_edit": "edit", "vlm_sft": "vlm"}


def info_for(grouped: dict, scratch) -> dict:
    """The demo dataset's dataset_info, under the dataset names `grouped` uses."""
    demo = yaml.safe_load((scratch / "demo_data" / "dataset_info.yaml").read_text())
    return {
        group: {name: demo[group][DEMO_NAMES[group]] for name in settings["dataset_names"]}
        for group, settings in grouped.items()
    }


def build(grouped: dict, scratch, tokenizer, special_tokens, **packing):
    return make_bagel_multimodal_dataset(
        tokenizer, special_tokens, grouped, dataset_info=info_for(grouped, scratch), local_rank=0, world_size=1,
        num_workers=1, **packing,
    )  # fmt: skip


def test_example_yaml_is_valid_with_max_latent_size_64_and_says_so_without(scratch, tokenizer, special_tokens):
    grouped = yaml.safe_load((REPO / "configs" / "example.yaml").read_text())
    assert "max_latent_size=64" in (REPO / "configs" / "example.yaml").read_text()
    build(grouped, scratch, tokenizer, special_tokens, max_latent_size=64)
    with pytest.raises(ConfigError, match="max_latent_size=32"):
        build(grouped, scratch, tokenizer, special_tokens)


def test_example_dataset_info_names_the_example_groups_and_datasets():
    grouped = yaml.safe_load((REPO / "configs" / "example.yaml").read_text())
    info = yaml.safe_load((REPO / "configs" / "example_dataset_info.yaml").read_text())
    assert {g: sorted(s["dataset_names"]) for g, s in grouped.items()} == {g: sorted(d) for g, d in info.items()}


def test_the_grouped_datasets_page_example_with_its_run_config(scratch, tokenizer, special_tokens):
    page = (REPO / "docs" / "formats" / "grouped_datasets.md").read_text()
    grouped_text, run_text = re.findall(r"^```yaml\n(.*?)^```$", page, re.S | re.M)[:2]
    grouped, run_config = yaml.safe_load(grouped_text), yaml.safe_load(run_text)
    build(grouped, scratch, tokenizer, special_tokens, **run_config["packing"])


def test_example_run_config_is_valid_as_shipped(scratch, tokenizer, special_tokens):
    from bagel_data.tools.run import load_run_config

    config = load_run_config(str(REPO / "configs" / "example_run.yaml"))
    assert config.grouped_datasets == yaml.safe_load((REPO / "configs" / "example.yaml").read_text())
    build(config.grouped_datasets, scratch, tokenizer, special_tokens, **config.packing)
