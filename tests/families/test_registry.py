"""A group's `dataset_class` must be a family: a base class, or a subclass left unfinished,
is a ConfigError naming the group, the key and the class, and listing the families."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from bagel_data import make_bagel_multimodal_dataset
from bagel_data.cli.main import app
from bagel_data.errors import ConfigError
from bagel_data.families.interleaved_base import ParquetStandardIterableDataset
from bagel_data.families.registry import DATASET_REGISTRY, check_family
from helpers.three_groups import three_groups_config, three_groups_info

PACKING = dict(expected_num_tokens=1490, max_num_tokens=1500, max_num_tokens_per_sample=900, prefer_buffer_before=600)
BASES = [
    ("bagel_data.families.base:DistributedIterableDataset", "get_data_paths, _unit_samples"),
    ("bagel_data:InterleavedBaseIterableDataset", "get_data_paths, _unit_samples"),
    ("bagel_data:ParquetStandardIterableDataset", "parse_row"),
]


class Unfinished(ParquetStandardIterableDataset):
    """A user's family that forgot parse_row."""


@pytest.mark.parametrize(("path", "missing"), BASES)
def test_a_base_class_as_dataset_class_is_a_config_error(golden_root, tokenizer, special_tokens, path, missing):
    grouped = three_groups_config(t2i_pretrain={"dataset_class": path})
    with pytest.raises(ConfigError) as caught:
        make_bagel_multimodal_dataset(tokenizer, special_tokens, grouped, dataset_info=three_groups_info(), **PACKING)
    error = caught.value
    assert error.key == "grouped_datasets.t2i_pretrain.dataset_class"
    assert error.value == path.split(":")[1]
    assert f"is a base class, not a family (it does not implement {missing})" in error.fix
    assert all(family.__name__ in error.fix for family in DATASET_REGISTRY.values())


def test_an_unfinished_subclass_is_refused_and_every_family_is_accepted():
    with pytest.raises(ConfigError, match="does not implement parse_row"):
        check_family("mine", Unfinished, "DATASET_REGISTRY['mine']")
    for name, family in DATASET_REGISTRY.items():
        assert check_family(name, family, name) is family


def test_validate_names_the_group_not_an_unexpected_error(golden_root, tmp_path):
    config = {
        "grouped_datasets": three_groups_config(vlm_sft={"dataset_class": BASES[0][0]}),
        "dataset_info": three_groups_info(),
        "packing": PACKING,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 1 and "unexpected error" not in result.output
    assert "vlm_sft.dataset_class" in " ".join(result.output.split())
    assert "NOT OK" in result.output
