"""The reference's public module: the names and signatures existing configs import.

This is the compatibility edge. `make_bagel_multimodal_dataset` checks the configuration,
builds one family dataset per group and wraps them in a `PackedDataset` with
`set_epoch(data_seed)` already applied.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging

from .assembly import assemble
from .assembly import rank_data_status as rank_data_status  # imported from here by callers
from .batch import SimpleCustomBatch, bagel_packed_collate_fn, collate_wrapper
from .compat import check_compat
from .config import DATASET_REGISTRY
from .distributed import RANK_UNSET, WORLD_UNSET
from .families.base import DistributedIterableDataset
from .families.edit import UnifiedEditIterableDataset
from .families.interleaved_base import InterleavedBaseIterableDataset, ParquetStandardIterableDataset
from .families.t2i import T2IIterableDataset
from .families.vlm import SftJSONLIterableDataset
from .media.images import ImageTransform, pil_img2rgb
from .media.video import FrameSampler
from .packing.config import PackingConfig
from .packing.layout import (
    get_flattened_position_ids_extrapolate,
    get_flattened_position_ids_interpolate,
    len2weight,
    patchify,
    prepare_attention_mask_per_sample,
)
from .packing.packed_dataset import PackedDataset
from .reference.config import BagelDatasetConfig, DataConfig
from .reference.helpers import MaxLongEdgeMinShortEdgeResize, init_arrow_pf_fs
from .schema import check_dataset_settings
from .sources.parquet import get_parquet_data_paths
from .tokenizer import add_special_tokens

# The reference's names, and those of NeMo AutoModel's multimodal module (whose
# InterleavedBaseIterableDataset / ParquetStandardIterableDataset live in families/).
__all__ = [
    "DATASET_REGISTRY",
    "DEFAULT_DATASET_INFO",
    "BagelDatasetConfig",
    "DataConfig",
    "DistributedIterableDataset",
    "FrameSampler",
    "ImageTransform",
    "InterleavedBaseIterableDataset",
    "MaxLongEdgeMinShortEdgeResize",
    "PackedDataset",
    "ParquetStandardIterableDataset",
    "SftJSONLIterableDataset",
    "SimpleCustomBatch",
    "T2IIterableDataset",
    "UnifiedEditIterableDataset",
    "add_special_tokens",
    "bagel_packed_collate_fn",
    "collate_wrapper",
    "get_flattened_position_ids_extrapolate",
    "get_flattened_position_ids_interpolate",
    "get_parquet_data_paths",
    "init_arrow_pf_fs",
    "len2weight",
    "make_bagel_multimodal_dataset",
    "patchify",
    "pil_img2rgb",
    "prepare_attention_mask_per_sample",
]

logger = logging.getLogger(__name__)

# Public names of the reference's module (SPEC section 2), for code that imports them.
# Paths always come from an explicit dataset_info, so the default mapping stays empty; the
# reference raises Pillow's PNG text-chunk limit process-wide with the two sizes below,
# which this library does not do (no global side effects).
DEFAULT_DATASET_INFO: dict = {}
_MaximumDecompressedSize = 1024
_MegaByte = 2**20


def _build(arguments: dict, strict: bool, max_consecutive_failures: int, compat, compat_seed) -> PackedDataset:
    check_dataset_settings({"data_seed": arguments["data_seed"]})
    config = PackingConfig(**{name: arguments[name] for name in PACKING_FIELDS + OPT_IN_FIELDS})
    parts = assemble(
        arguments["tokenizer"],
        arguments["grouped_datasets"],
        arguments["dataset_info"],
        config,
        local_rank=arguments["local_rank"],
        world_size=arguments["world_size"],
        num_workers=arguments["num_workers"],
        data_status=arguments["data_status"],
        strict=strict,
        max_consecutive_failures=max_consecutive_failures,
        compat=compat,
    )
    packed = PackedDataset.from_groups(
        parts.datasets,
        config,
        dict(arguments["special_tokens"]),
        weights=parts.weights,
        mandatory=parts.mandatory,
        local_rank=parts.local_rank,
        world_size=parts.world_size,
        num_workers=arguments["num_workers"],
        data_seed=arguments["data_seed"],
        tokenizer=arguments["tokenizer"],
        compat=compat,
    )
    packed.set_epoch(arguments["data_seed"])
    packed.compat_seed = compat_seed
    packed.set_epoch(arguments["data_seed"])
    return packed


# The reference's signature: the packing settings (names and defaults from PackingConfig)
# sit in two runs, around `data_status` and `data_seed`.
# The opt-in packing modes (packing/strategies.py) are keyword-only: they are no part of the
# reference's positional order.
OPT_IN_FIELDS = ("mix_by", "pack_strategy", "pixel_format")
PACKING_FIELDS = tuple(field.name for field in dataclasses.fields(PackingConfig) if field.name not in OPT_IN_FIELDS)
_SPLIT = PACKING_FIELDS.index("text_cond_dropout_prob")
_P = inspect.Parameter


def _positional(name: str, default=_P.empty) -> inspect.Parameter:
    return _P(name, _P.POSITIONAL_OR_KEYWORD, default=default)


def _packing_parameters(names) -> list[inspect.Parameter]:
    defaults = {field.name: field.default for field in dataclasses.fields(PackingConfig)}
    return [_positional(name, defaults[name]) for name in names]


_SIGNATURE = inspect.Signature(
    [
        _positional("tokenizer"),
        _positional("special_tokens"),
        _positional("grouped_datasets"),
        _positional("local_rank", RANK_UNSET),
        _positional("world_size", WORLD_UNSET),
        _positional("num_workers", 4),
        *_packing_parameters(PACKING_FIELDS[:_SPLIT]),
        _positional("data_status", None),
        _positional("data_seed", 42),
        *_packing_parameters(PACKING_FIELDS[_SPLIT:]),
        _positional("dataset_info", None),
        _P("strict", _P.KEYWORD_ONLY, default=False),
        _P("max_consecutive_failures", _P.KEYWORD_ONLY, default=100),
        _P("compat", _P.KEYWORD_ONLY, default=None),
        _P("compat_seed", _P.KEYWORD_ONLY, default=None),
        *[_P(name, _P.KEYWORD_ONLY, default=getattr(PackingConfig, name)) for name in OPT_IN_FIELDS],
    ],
    return_annotation="PackedDataset",
)


def make_bagel_multimodal_dataset(*args, **kwargs) -> PackedDataset:
    """Build a BAGEL packed dataset for Stage 1 or Stage 2 training.

    Signature (see `inspect.signature`): the reference's `(tokenizer, special_tokens,
    grouped_datasets, local_rank=0, world_size=1, num_workers=4, <packing settings>,
    data_status=None, data_seed=42, <dropouts and image sizes>, dataset_info=None)`, every
    setting named and defaulted as in `PackingConfig`, plus keyword-only `strict=False`,
    `max_consecutive_failures=100`, `compat=None`, `compat_seed=None` (the main process's
    seed of compat mode's generators, default `data_seed`) and the opt-in packing modes
    `mix_by="samples"` and `pack_strategy="greedy"` (docs/packing.md).

    `grouped_datasets` and `dataset_info` are dicts or paths to YAML/JSON files.
    `local_rank` / `world_size` default to the initialized torch.distributed process group
    (else 0 / 1); values passed explicitly win.
    `data_status` (group -> per-worker positions, as rebuilt from `batch_data_indexes`, or
    the list of those gathered over ranks) resumes each group just after those positions.
    `strict` raises on the first bad row; otherwise bad rows are skipped and counted by
    reason. `compat="bagel"` reproduces the reference's output exactly (SPEC section 8).
    """
    bound = _SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    compat = check_compat(arguments.pop("compat"))
    compat_seed = arguments.pop("compat_seed")
    strict, max_failures = arguments.pop("strict"), arguments.pop("max_consecutive_failures")
    return _build(arguments, strict, max_failures, compat, compat_seed)


make_bagel_multimodal_dataset.__signature__ = _SIGNATURE  # type: ignore[attr-defined]
