"""The one build path: from `Settings`, the groups and the dataset info to a packed dataset.

Every entrance comes through here: `make_bagel_multimodal_dataset`, the reference-shaped
`PackedDataset(data_config, ...)` and `BagelDatasetConfig.build` (the faces in
`bagel_data/nemo/`), and the CLI's run configs (`tools/run.py`). `assemble` checks the
settings, the groups and their image sizes against the position tables, warns about
budgets that can overflow, decides the compat policy once and builds one family dataset per
group with this rank's `data_status` and that policy; `build_packed_dataset` puts the packer
over them and applies `set_epoch(data_seed)`.
"""

from __future__ import annotations

import warnings
from typing import Any

from .checkpoint.checks import check_data_status
from .compat import CompatPolicy
from .config import load_mapping, parse_groups
from .distributed import resolve_topology
from .errors import ConfigError, ConfigWarning
from .packing.config import PackingConfig
from .packing.packed_dataset import PackedDataset
from .packing.parts import Assembled
from .schema import Settings, check_topology


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


def _transforms(group):
    """(key, transform, is_vae) of each image transform of a group: its family says which
    model input `image_transform_args` sizes (`IMAGE_TRANSFORM_KIND`: the VLM's is the ViT's)."""
    yield "image_transform_args", group.kwargs["transform"], group.family.IMAGE_TRANSFORM_KIND == "vae"
    if "vit_transform" in group.kwargs:
        yield "vit_image_transform_args", group.kwargs["vit_transform"], False


def _check_strides(groups, config: PackingConfig) -> None:
    """A transform snaps image sides to its stride; the packer cuts them into latents of
    `vae_image_downsample` or patches of `vit_patch_size` pixels. A stride that is not a
    multiple of that leaves partial latents or patches (wrong token counts)."""
    for group in groups:
        for key, transform, is_vae in _transforms(group):
            name = "vae_image_downsample" if is_vae else "vit_patch_size"
            unit = getattr(config, name)
            if transform.stride % unit:
                raise ConfigError(
                    name,
                    unit,
                    f"{group.name}.{key}.image_stride={transform.stride} is not a multiple of it, so images "
                    f"would not divide into whole {'latents' if is_vae else 'patches'}; set image_stride to "
                    f"{unit} (or a multiple), or {name} to {transform.stride}",
                )


def _check_position_tables(groups, config: PackingConfig) -> None:
    """Extrapolated position ids index an `m x m` table: an image side must fit in it."""
    if config.interpolate_pos:
        return  # interpolation maps any size onto the table
    for group in groups:
        for key, transform, is_vae in _transforms(group):
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
    settings: Settings,
    *,
    local_rank: int,
    world_size: int,
    num_workers: int,
    data_status=None,
) -> Assembled:
    """Check the configuration and build one family dataset per group, all sharing one
    compat policy (the packer gets the same one through the returned parts)."""
    check_topology(local_rank, world_size, num_workers)
    settings.check()
    local_rank, world_size = resolve_topology(local_rank, world_size)
    grouped, _ = load_mapping(grouped_datasets, "grouped_datasets")
    info, info_base = load_mapping(dataset_info, "dataset_info")
    groups = parse_groups(grouped, info, info_base)
    _check_strides(groups, settings)
    _check_position_tables(groups, settings)
    for risk in budget_risks(groups, settings):
        warnings.warn(risk, ConfigWarning, stacklevel=4)  # the caller of the public builder
    policy = CompatPolicy(settings.compat, settings.compat_seed)
    status_of_rank = check_data_status(rank_data_status(data_status, local_rank), [group.name for group in groups])
    shared = {
        "tokenizer": tokenizer,
        "local_rank": local_rank,
        "world_size": world_size,
        "num_workers": num_workers,
        "strict": settings.strict,
        "max_consecutive_failures": settings.max_consecutive_failures,
        # Only compat mode needs the families to share the packer's policy (its stream); in
        # the default mode each family's own default policy says the same, and a user's
        # family written before `compat` existed keeps working.
        **({"compat": policy} if policy.reference else {}),
    }
    datasets = {group.name: _family_dataset(group, status_of_rank, shared) for group in groups}
    for dataset in datasets.values():  # the walk by rows' window (families/row_plan.py)
        units: Any = getattr(dataset, "units", None)  # a family of ours (or a user's, built on it)
        if hasattr(units, "shuffle_buffer_size"):
            units.shuffle_buffer_size = settings.shuffle_buffer_size
    return Assembled(
        datasets,
        weights={group.name: group.weight for group in groups},
        mandatory={group.name: group.is_mandatory for group in groups},
        config=settings,
        local_rank=local_rank,
        world_size=world_size,
        policy=policy,
    )


def build_packed_dataset(
    tokenizer,
    special_tokens,
    grouped_datasets,
    dataset_info,
    settings: Settings,
    *,
    local_rank: int,
    world_size: int,
    num_workers: int,
    data_status=None,
    global_seed: int | None = None,
    cls: type[PackedDataset] = PackedDataset,
) -> PackedDataset:
    """The packed dataset of these settings, as an instance of `cls` (an entrance passes
    its own public class), with `set_epoch(settings.data_seed)` applied."""
    parts = assemble(
        tokenizer,
        grouped_datasets,
        dataset_info,
        settings,
        local_rank=local_rank,
        world_size=world_size,
        num_workers=num_workers,
        data_status=data_status,
    )
    packed = cls.from_parts(
        parts, dict(special_tokens), num_workers=num_workers, tokenizer=tokenizer, global_seed=global_seed
    )
    packed.set_epoch(settings.data_seed)
    return packed


def _family_dataset(group, status_of_rank: dict | None, shared: dict):
    """The group's family dataset, resuming from this rank's `data_status` entry for the
    group when the group resumes from it; `shared`: the arguments every group gets."""
    status = None
    if status_of_rank is not None and group.resume_data_status:
        status = status_of_rank.get(group.name)
    return group.family(dataset_name=group.name, data_status=status, **shared, **group.kwargs)
