"""Checking config sections against the schema; each returns the checked values.

These check types and ranges only (no file is read); `config.py` adds what needs the
filesystem (paths exist, folders are folders, parquet_info parses).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .kinds import check_section, join
from .sections import (
    DATASET_FIELDS,
    DATASET_INFO_FIELDS,
    FRAME_SAMPLER_FIELDS,
    GROUP_FIELDS,
    PACKING_FIELDS,
    RUN_FIELDS,
    TOPOLOGY_FIELDS,
    TRANSFORM_FIELDS,
)
from .settings import SETTING_TABLE
from .weights import check_phases

RUN_PACKING_FIELDS = {**PACKING_FIELDS, **DATASET_FIELDS}


def check_transform_args(where: str, args: object) -> dict:
    """The keyword arguments of `ImageTransform`, checked."""
    return check_section(where, args, TRANSFORM_FIELDS)


def check_frame_sampler_args(where: str, args: object) -> dict:
    """The keyword arguments of `FrameSampler`, checked by type (it checks the ranges)."""
    return check_section(where, args, FRAME_SAMPLER_FIELDS)


def check_group_args(group: str, args: object, allowed, fields: Mapping[str, Any] = GROUP_FIELDS) -> dict:
    """One `grouped_datasets` group: its keys (those `allowed` for its family) and values
    (those `fields` describe: every group's, and its family's own)."""
    args = check_section(group, args, fields, allowed=allowed)
    for key in ("image_transform_args", "vit_image_transform_args"):
        if args.get(key) is not None:
            check_transform_args(join(group, key), args[key])
    if args.get("frame_sampler_args") is not None:
        check_frame_sampler_args(join(group, "frame_sampler_args"), args["frame_sampler_args"])
    names, counts = args.get("dataset_names", []), args.get("num_used_data", [])
    if len(counts) != len(names):
        raise ConfigError(
            join(group, "num_used_data"), counts, f"give one positive int per dataset name ({len(names)})"
        )
    return args


def check_group_weights(weights: Mapping[str, Any]) -> None:
    """The weights (numbers or schedules) sum to a finite number more than 0 at every step."""
    check_phases(weights)


def check_dataset_info_group(group: str, entries: object) -> dict:
    """`dataset_info[group]`: a mapping of dataset name -> entry."""
    where = f"dataset_info.{group}"
    if not isinstance(entries, Mapping):
        raise ConfigError(where, entries, "must be a mapping of dataset name -> {data_dir: ..., ...}")
    return dict(entries)


def check_dataset_entry(
    group: str, name: str, entry: object, fields: Mapping[str, Any] = DATASET_INFO_FIELDS, allowed=None
) -> dict:
    """One `dataset_info` entry, by type (the paths are checked by config.py): the keys
    `allowed` (default: those of `fields`, every entry's and the family's own)."""
    where = f"dataset_info.{group}.{name}"
    if not isinstance(entry, Mapping):
        raise ConfigError(where, entry, "must be a mapping such as {data_dir: path/to/folder}, not a path alone")
    return check_section(where, entry, fields, allowed=allowed)


def check_settings(values: Mapping, where: str = "") -> dict:
    """Any of the settings (`Settings` fields) by type and range."""
    return check_section(where, values, SETTING_TABLE)


def check_topology(local_rank: object, world_size: object, num_workers: object) -> None:
    """Types and lower bounds (the rank's upper bound is checked once the process group
    has filled in defaults)."""
    values = {"local_rank": local_rank, "world_size": world_size, "num_workers": num_workers}
    check_section("", values, TOPOLOGY_FIELDS)


def check_run_config(data: object, where: str = "config") -> dict:
    """The top level of a run config, and its `packing` section."""
    data = check_section(where, data, RUN_FIELDS)
    check_section("packing", data.get("packing") or {}, RUN_PACKING_FIELDS)
    return data
