"""The reference's public module: the names and signatures existing configs import.

This is the compatibility edge. `make_bagel_multimodal_dataset` checks the configuration,
builds one family dataset per group and wraps them in a `PackedDataset` with
`set_epoch(data_seed)` already applied.
"""

from __future__ import annotations

import logging
import warnings

from .compat import check_compat
from .config import DATASET_REGISTRY, load_mapping, parse_groups
from .distributed import RANK_UNSET, WORLD_UNSET, resolve_topology
from .errors import ConfigError, ConfigWarning
from .families.edit import UnifiedEditIterableDataset
from .families.t2i import T2IIterableDataset
from .families.vlm import SftJSONLIterableDataset
from .packing.config import PackingConfig
from .packing.packed_dataset import PackedDataset

__all__ = [
    "DATASET_REGISTRY",
    "DEFAULT_DATASET_INFO",
    "SftJSONLIterableDataset",
    "T2IIterableDataset",
    "UnifiedEditIterableDataset",
    "make_bagel_multimodal_dataset",
]

logger = logging.getLogger(__name__)

# Kept for import compatibility: paths always come from an explicit dataset_info.
DEFAULT_DATASET_INFO: dict = {}
# The reference raises Pillow's PNG text-chunk limit to this size process-wide; the
# constants stay importable, but the library changes no global Pillow setting.
_MaximumDecompressedSize = 1024
_MegaByte = 2**20


def _check_budgets(config: PackingConfig) -> None:
    if config.max_num_tokens_per_sample > config.max_num_tokens:
        raise ConfigError(
            "max_num_tokens_per_sample",
            config.max_num_tokens_per_sample,
            f"must not exceed max_num_tokens={config.max_num_tokens}",
        )
    if config.expected_num_tokens > config.max_num_tokens:
        raise ConfigError(
            "expected_num_tokens", config.expected_num_tokens, f"must not exceed max_num_tokens={config.max_num_tokens}"
        )
    for key in ("text_cond_dropout_prob", "vit_cond_dropout_prob", "vae_cond_dropout_prob"):
        value = getattr(config, key)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(key, value, "a probability must lie in [0, 1]")


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


def make_bagel_multimodal_dataset(
    tokenizer,
    special_tokens,
    grouped_datasets,
    local_rank: int = RANK_UNSET,
    world_size: int = WORLD_UNSET,
    num_workers: int = 4,
    expected_num_tokens: int = 32768,
    max_num_tokens_per_sample: int = 16384,
    max_num_tokens: int = 36864,
    prefer_buffer_before: int = 16384,
    max_buffer_size: int = 50,
    interpolate_pos: bool = False,
    use_flex: bool = False,
    data_status=None,
    data_seed: int = 42,
    text_cond_dropout_prob: float = 0.1,
    vit_cond_dropout_prob: float = 0.4,
    vae_cond_dropout_prob: float = 0.1,
    vae_image_downsample: int = 16,
    max_latent_size: int = 32,
    vit_patch_size: int = 14,
    max_num_patch_per_side: int = 70,
    dataset_info=None,
    *,
    strict: bool = False,
    max_consecutive_failures: int = 100,
    compat=None,
    compat_seed: int | None = None,
) -> PackedDataset:
    """Build a BAGEL packed dataset for Stage 1 or Stage 2 training.

    `grouped_datasets` and `dataset_info` are dicts or paths to YAML/JSON files.
    `local_rank` / `world_size` default to the initialized torch.distributed process group
    (else 0 / 1); values passed explicitly win.
    `data_status` (group -> per-worker positions, as rebuilt from `batch_data_indexes`)
    resumes each group just after those positions. `strict` raises on the first bad row;
    otherwise bad rows are skipped and counted by reason.
    `compat="bagel"` reproduces the reference exactly, for any configuration (docs/compat.md);
    its random draws then come from private generators seeded as the reference's globals are
    in each DataLoader worker, or, in the main process, from `compat_seed` (default: `data_seed`).
    """
    check_compat(compat)
    config = PackingConfig(
        expected_num_tokens=expected_num_tokens,
        max_num_tokens_per_sample=max_num_tokens_per_sample,
        max_num_tokens=max_num_tokens,
        prefer_buffer_before=prefer_buffer_before,
        max_buffer_size=max_buffer_size,
        interpolate_pos=interpolate_pos,
        use_flex=use_flex,
        text_cond_dropout_prob=text_cond_dropout_prob,
        vit_cond_dropout_prob=vit_cond_dropout_prob,
        vae_cond_dropout_prob=vae_cond_dropout_prob,
        vae_image_downsample=vae_image_downsample,
        max_latent_size=max_latent_size,
        vit_patch_size=vit_patch_size,
        max_num_patch_per_side=max_num_patch_per_side,
    )
    _check_budgets(config)
    local_rank, world_size = resolve_topology(local_rank, world_size)
    grouped, _ = load_mapping(grouped_datasets, "grouped_datasets")
    info, info_base = load_mapping(dataset_info, "dataset_info")
    groups = parse_groups(grouped, info, info_base)
    _check_position_tables(groups, config)
    for risk in budget_risks(groups, config):
        warnings.warn(risk, ConfigWarning, stacklevel=2)
    datasets = {}
    for group in groups:
        status = None
        if data_status is not None and group.resume_data_status:
            status = data_status.get(group.name)
        dataset = group.family(
            dataset_name=group.name,
            tokenizer=tokenizer,
            local_rank=local_rank,
            world_size=world_size,
            num_workers=num_workers,
            data_status=status,
            **group.kwargs,
            **({"compat": compat} if compat else {}),
        )
        dataset.strict, dataset.max_consecutive_failures = strict, max_consecutive_failures
        datasets[group.name] = dataset
    packed = PackedDataset(
        datasets,
        config,
        dict(special_tokens),
        weights={group.name: group.weight for group in groups},
        mandatory={group.name: group.is_mandatory for group in groups},
        local_rank=local_rank,
        world_size=world_size,
        num_workers=num_workers,
        data_seed=data_seed,
        tokenizer=tokenizer,
        compat=compat,
    )
    packed.compat_seed = compat_seed
    packed.set_epoch(data_seed)
    return packed
