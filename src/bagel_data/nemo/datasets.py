"""`make_bagel_multimodal_dataset` and the dataset names of the reference's module.

Mirrors `nemo_automodel.components.datasets.multimodal.datasets`. The signature is the
reference's, generated from `Settings`: the packing budgets, `data_status` and `data_seed`,
the dropouts and sizes, `dataset_info` in the reference's positional order, then every newer
setting keyword-only (`strict`, `max_consecutive_failures`, `compat`, `compat_seed`,
`mix_by`, `pack_strategy`, ...).
"""

from __future__ import annotations

import inspect

from ..assembly import build_packed_dataset, rank_data_status
from ..distributed import RANK_UNSET, WORLD_UNSET
from ..families.edit import UnifiedEditIterableDataset
from ..families.registry import DATASET_REGISTRY
from ..families.t2i import T2IIterableDataset
from ..families.vlm import SftJSONLIterableDataset
from ..schema.settings import SETTING_NAMES, Settings
from .packing import DEFAULT_DATASET_INFO, BagelDatasetConfig, PackedDataset
from .signatures import keyword_settings, positional, positional_settings

_SIGNATURE = inspect.Signature(
    [
        positional("tokenizer"),
        positional("special_tokens"),
        positional("grouped_datasets"),
        positional("local_rank", RANK_UNSET),
        positional("world_size", WORLD_UNSET),
        positional("num_workers", 4),
        *positional_settings("budget"),
        positional("data_status", None),
        *positional_settings("seed"),
        *positional_settings("data_config"),
        positional("dataset_info", None),
        *keyword_settings("option"),
    ],
    return_annotation="PackedDataset",
)


def make_bagel_multimodal_dataset(*args, **kwargs) -> PackedDataset:
    """Build a BAGEL packed dataset for Stage 1 or Stage 2 training.

    Signature (see `inspect.signature`): the reference's `(tokenizer, special_tokens,
    grouped_datasets, local_rank=0, world_size=1, num_workers=4, <packing budgets>,
    data_status=None, data_seed=42, <dropouts and image sizes>, dataset_info=None)`, then
    every newer setting keyword-only; each setting is named, defaulted and checked as in
    `Settings` (docs/formats/run_config.md lists them).

    `grouped_datasets` and `dataset_info` are dicts or paths to YAML/JSON files.
    `local_rank` / `world_size` default to the initialized torch.distributed process group
    (else 0 / 1); values passed explicitly win. `data_status` (group -> per-worker
    positions, as rebuilt from `batch_data_indexes`, or the list of those gathered over
    ranks) resumes each group just after those positions. `compat="bagel"` reproduces the
    reference's output exactly (docs/compat.md). `set_epoch(data_seed)` is already applied.
    """
    bound = _SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    given = bound.arguments
    packed = build_packed_dataset(
        given["tokenizer"],
        given["special_tokens"],
        given["grouped_datasets"],
        given["dataset_info"],
        Settings(**{name: given[name] for name in SETTING_NAMES}),
        local_rank=given["local_rank"],
        world_size=given["world_size"],
        num_workers=given["num_workers"],
        data_status=given["data_status"],
        cls=PackedDataset,
    )
    assert isinstance(packed, PackedDataset)
    return packed


make_bagel_multimodal_dataset.__signature__ = _SIGNATURE  # type: ignore[attr-defined]

__all__ = [
    "DATASET_REGISTRY",
    "DEFAULT_DATASET_INFO",
    "BagelDatasetConfig",
    "SftJSONLIterableDataset",
    "T2IIterableDataset",
    "UnifiedEditIterableDataset",
    "make_bagel_multimodal_dataset",
    "rank_data_status",
]
