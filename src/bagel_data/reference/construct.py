"""From a reference-shaped data config (`DataConfig` / `BagelDatasetConfig`) to the parts of a
`PackedDataset`: the typed `PackingConfig` and the checked family datasets."""

from __future__ import annotations

import dataclasses

from .. import datasets
from ..assembly import Assembled, assemble
from ..errors import ConfigError
from ..packing.config import PackingConfig

# What `PackedDataset` reads from its data config; the budgets come from its own arguments.
DATA_CONFIG_FIELDS = (
    "text_cond_dropout_prob",
    "vit_cond_dropout_prob",
    "vae_cond_dropout_prob",
    "vae_image_downsample",
    "max_latent_size",
    "vit_patch_size",
    "max_num_patch_per_side",
)
assert set(DATA_CONFIG_FIELDS) <= {field.name for field in dataclasses.fields(PackingConfig)}


def packing_config(data_config, budgets: dict) -> PackingConfig:
    """The typed settings: `budgets` (the packing-budget arguments) plus the data config's
    dropout and size attributes as they are now."""
    missing = [name for name in DATA_CONFIG_FIELDS if not hasattr(data_config, name)]
    if missing:
        raise ConfigError(
            "data_config",
            type(data_config).__name__,
            f"lacks {missing}; pass a bagel_data.DataConfig or bagel_data.BagelDatasetConfig",
        )
    return PackingConfig(**budgets, **{name: getattr(data_config, name) for name in DATA_CONFIG_FIELDS})


def grouped_datasets_of(data_config):
    """The group mapping of a data config (a `*_path` file wins, as in NeMo AutoModel)."""
    path = getattr(data_config, "grouped_datasets_path", None)
    grouped = path if path is not None else getattr(data_config, "grouped_datasets", None)
    if grouped is None:
        raise ConfigError(
            "data_config.grouped_datasets", None, "set grouped_datasets (a mapping) or grouped_datasets_path"
        )
    return grouped


def dataset_info_for(data_config, dataset_info):
    """`dataset_info` if given, else the config's own, else `DEFAULT_DATASET_INFO` when filled."""
    if dataset_info is not None:
        return dataset_info
    for key in ("dataset_info_path", "dataset_info"):
        value = getattr(data_config, key, None)
        if value is not None:
            return value
    if datasets.DEFAULT_DATASET_INFO:
        return datasets.DEFAULT_DATASET_INFO
    raise ConfigError(
        "dataset_info",
        None,
        "no dataset_info was passed and bagel_data.datasets.DEFAULT_DATASET_INFO is empty: pass "
        "dataset_info= (a mapping group -> dataset name -> {data_dir, ...}, or a YAML/JSON path) "
        "or fill DEFAULT_DATASET_INFO as you would edit BAGEL's data/dataset_info.py",
    )


def assemble_from_data_config(
    data_config,
    tokenizer,
    budgets: dict,
    dataset_info,
    *,
    local_rank: int,
    world_size: int,
    num_workers: int,
    data_status,
    strict: bool,
    max_consecutive_failures: int,
) -> Assembled:
    return assemble(
        tokenizer,
        grouped_datasets_of(data_config),
        dataset_info_for(data_config, dataset_info),
        packing_config(data_config, budgets),
        local_rank=local_rank,
        world_size=world_size,
        num_workers=num_workers,
        data_status=data_status,
        strict=strict,
        max_consecutive_failures=max_consecutive_failures,
    )
