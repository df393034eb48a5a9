"""From a checked configuration to the family datasets of a packed dataset (`assemble`).

Every builder goes through here: `make_bagel_multimodal_dataset` (`datasets.py`), the
reference-shaped `PackedDataset(data_config, ...)` (`reference/construct.py`) and the CLI's
run configs. `assemble` checks the settings, the groups and their image sizes against the
position tables, warns about budgets that can overflow, and builds one family dataset per
group with this rank's `data_status`.
"""

from __future__ import annotations

import dataclasses
import warnings

from .checkpoint.checks import check_data_status
from .compat import check_compat
from .config import load_mapping, parse_groups
from .distributed import resolve_topology
from .errors import ConfigError, ConfigWarning
from .families.vlm import SftJSONLIterableDataset
from .packing.config import PackingConfig
from .schema import check_dataset_settings, check_topology


def budget_risks(groups, config: PackingConfig) -> list[str]:
    """Settings that run but can make oversize packs or waste the buffer (not errors:
    the reference's own example configs have some of them)."""
    risks = []
    mandatory = [group.name for group in groups if group.is_mandatory]
    if len(mandatory) * config.max_num_tokens_per_sample > config.max_num_tokens:
        risks.append(
            f"mandatory groups {mandatory} may together take up to {len(mandatory)} x "
            f"max_num_tokens_per_sample={config.max_num_tokens_per_sample} tokens, more than "
            f"max_num_tokens={config.max_num_tokens}; a pack could overflow (an error with use_flex). "
            "Lower max_num_tokens_per_sample or make fewer groups mandatory."
        )
    if config.prefer_buffer_before + config.max_num_tokens_per_sample > config.max_num_tokens:
        risks.append(
            f"prefer_buffer_before + max_num_tokens_per_sample = "
            f"{config.prefer_buffer_before + config.max_num_tokens_per_sample} > max_num_tokens="
            f"{config.max_num_tokens}: a buffered sample may not fit when it is taken and waits a pack."
        )
    return risks


def _check_position_tables(groups, config: PackingConfig) -> None:
    """Extrapolated position ids index an `m x m` table: an image side must fit in it."""
    if config.interpolate_pos:
        return  # interpolation maps any size onto the table
    for group in groups:
        transforms = [("image_transform_args", group.kwargs["transform"])]
        if "vit_transform" in group.kwargs:
            transforms.append(("vit_image_transform_args", group.kwargs["vit_transform"]))
        for key, transform in transforms:
            is_vae = group.family is not SftJSONLIterableDataset and key == "image_transform_args"
            unit = config.vae_image_downsample if is_vae else config.vit_patch_size
            limit = config.max_latent_size if is_vae else config.max_num_patch_per_side
            table = "max_latent_size" if is_vae else "max_num_patch_per_side"
            side = transform.rule.max_size // unit
            if side > limit:
                raise ConfigError(
                    f"{group.name}.{key}.max_image_size",
                    transform.rule.max_size,
                    f"gives {side} positions per side but {table}={limit}; lower max_image_size to "
                    f"{limit * unit}, raise {table}, or set interpolate_pos=True",
                )


@dataclasses.dataclass(frozen=True)
class Assembled:
    """The checked parts of a packed dataset: the family datasets and how they mix."""

    datasets: dict
    weights: dict
    mandatory: dict
    config: PackingConfig
    local_rank: int
    world_size: int


def rank_data_status(data_status, local_rank: int):
    """This rank's `data_status`: the dict itself, or its entry of a list gathered over ranks
    (BAGEL's trainer saves `gather_object`'s list; a rank beyond it starts fresh)."""
    if isinstance(data_status, (list, tuple)):
        return data_status[local_rank] if local_rank < len(data_status) else None
    return data_status


def assemble(
    tokenizer,
    grouped_datasets,
    dataset_info,
    config: PackingConfig,
    *,
    local_rank: int,
    world_size: int,
    num_workers: int,
    data_status=None,
    strict: bool = False,
    max_consecutive_failures: int = 100,
    compat=None,
) -> Assembled:
    """Check the configuration and build one family dataset per group."""
    check_topology(local_rank, world_size, num_workers)
    check_dataset_settings({"strict": strict, "max_consecutive_failures": max_consecutive_failures})
    check_compat(compat)
    config.check()
    local_rank, world_size = resolve_topology(local_rank, world_size)
    grouped, _ = load_mapping(grouped_datasets, "grouped_datasets")
    info, info_base = load_mapping(dataset_info, "dataset_info")
    groups = parse_groups(grouped, info, info_base)
    _check_position_tables(groups, config)
    for risk in budget_risks(groups, config):
        warnings.warn(risk, ConfigWarning, stacklevel=4)  # the caller of the public builder
    status_of_rank = check_data_status(rank_data_status(data_status, local_rank), [group.name for group in groups])
    shared = {
        "tokenizer": tokenizer,
        "local_rank": local_rank,
        "world_size": world_size,
        "num_workers": num_workers,
        "strict": strict,
        "max_consecutive_failures": max_consecutive_failures,
        **({"compat": compat} if compat else {}),
    }
    datasets = {group.name: _family_dataset(group, status_of_rank, shared) for group in groups}
    return Assembled(
        datasets,
        weights={group.name: group.weight for group in groups},
        mandatory={group.name: group.is_mandatory for group in groups},
        config=config,
        local_rank=local_rank,
        world_size=world_size,
    )


def _family_dataset(group, status_of_rank: dict | None, shared: dict):
    """The group's family dataset, resuming from this rank's `data_status` entry for the
    group when the group resumes from it; `shared`: the arguments every group gets."""
    status = None
    if status_of_rank is not None and group.resume_data_status:
        status = status_of_rank.get(group.name)
    return group.family(dataset_name=group.name, data_status=status, **shared, **group.kwargs)
