"""Reading and checking `grouped_datasets` and `dataset_info`, then building the families.

Every mistake is reported here, before any data is read, as a `ConfigError` naming the key,
the value and the fix. Both mappings may be given as dicts or as paths to YAML/JSON files;
relative paths inside a `dataset_info` file are taken relative to that file's folder.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

import yaml

from .errors import ConfigError
from .families.edit import UnifiedEditIterableDataset
from .families.interleaved_base import ParquetStandardIterableDataset
from .families.registry import COMMON_GROUP_KEYS, DATASET_REGISTRY, allowed_group_keys, resolve_family
from .families.vlm import SftJSONLIterableDataset
from .media.images import ImageTransform
from .media.video import FrameSampler
from .sources import storage

# The registry lives with the families; re-exported here for existing imports.
ALLOWED_GROUP_KEYS = {family: allowed_group_keys(family) for family in DATASET_REGISTRY.values()}
_TRANSFORM_KEYS = {
    "max_image_size",
    "min_image_size",
    "image_stride",
    "max_pixels",
    "image_mean",
    "image_std",
    "fast_decode",
}


def load_mapping(source: Mapping | str | os.PathLike | None, what: str) -> tuple[dict, str | None]:
    """(mapping, folder of the file it came from or None) from a dict or a YAML/JSON path."""
    if source is None:
        raise ConfigError(what, None, f"{what} is required: pass a dict or the path of a YAML/JSON file")
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source)), None
    path = os.fspath(source)
    if not storage.exists(path):
        raise ConfigError(what, path, "the file does not exist")
    text = storage.read_bytes(path).decode("utf-8")
    data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ConfigError(what, path, "the file must hold a mapping at its top level")
    return data, None if storage.is_uri(path) else os.path.dirname(os.path.abspath(path))


def _resolve(path: str, base: str | None) -> str:
    if base is None or storage.is_uri(path) or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(base, path))


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    """One checked group of `grouped_datasets`, with its family and resolved inputs."""

    name: str
    family: type
    weight: float
    is_mandatory: bool
    resume_data_status: bool
    kwargs: dict[str, Any]


def _check_transform_args(group: str, key: str, args: object) -> dict:
    if not isinstance(args, Mapping):
        raise ConfigError(f"{group}.{key}", args, "must be a mapping with max_image_size, min_image_size, image_stride")
    unknown = set(args) - _TRANSFORM_KEYS
    if unknown:
        raise ConfigError(f"{group}.{key}", sorted(unknown), f"unknown key(s); allowed: {sorted(_TRANSFORM_KEYS)}")
    missing = {"max_image_size", "min_image_size", "image_stride"} - set(args)
    if missing:
        raise ConfigError(f"{group}.{key}", dict(args), f"missing {sorted(missing)}")
    return dict(args)


def _meta(dataset_info: dict, group: str, name: str, key: str, base: str | None, required: bool = True):
    entry = dataset_info.get(group, {}).get(name, {})
    value = entry.get(key)
    if value is None:
        if required:
            raise ConfigError(f"dataset_info.{group}.{name}.{key}", None, f"add the {key} of dataset {name!r}")
        return None
    value = _resolve(str(value), base)
    try:
        found = storage.exists(value)
    except storage.StorageOptionsError as exc:  # a scheme no filesystem handles
        raise ConfigError(f"dataset_info.{group}.{name}.{key}", value, str(exc)) from None
    if not found:
        raise ConfigError(f"dataset_info.{group}.{name}.{key}", value, "this path does not exist")
    return value


_URI_KEYS = ("data_dir", "jsonl_path", "parquet_info_path")


def _register_storage_options(dataset_info: dict, group: str, name: str) -> None:
    """Give the buckets of one dataset's URIs the filesystem options of its entry."""
    entry = dataset_info.get(group, {}).get(name, {})
    options = entry.get("storage_options")
    if options is None:
        return
    key = f"dataset_info.{group}.{name}.storage_options"
    if not isinstance(options, Mapping):
        raise ConfigError(key, type(options).__name__, "must be a mapping of filesystem options")
    uris = [str(entry[k]) for k in _URI_KEYS if entry.get(k) is not None and storage.is_uri(str(entry[k]))]
    if not uris:
        raise ConfigError(
            key, sorted(options), "storage options apply to s3://, gs:// or hdfs:// paths; this entry has none"
        )
    for uri in uris:
        try:
            storage.register_options(uri, dict(options))
        except storage.StorageOptionsError as exc:
            # Only the option names are shown: the values may be secrets.
            raise ConfigError(
                key,
                sorted(options),
                f"{exc}; see pyarrow.fs's S3FileSystem / GcsFileSystem / "
                "HadoopFileSystem for the accepted keyword arguments",
            ) from None


def parse_group(name: str, args: Mapping, dataset_info: dict, info_base: str | None) -> GroupSpec:
    """Check one group's config and gather what its family's constructor needs."""
    family = resolve_family(name, args)
    if not isinstance(args, Mapping):
        raise ConfigError(f"grouped_datasets.{name}", args, "must be a mapping")
    allowed = allowed_group_keys(family)
    unknown = set(args) - allowed
    if unknown:
        raise ConfigError(f"grouped_datasets.{name}", sorted(unknown), f"unknown key(s); allowed: {sorted(allowed)}")
    names = args.get("dataset_names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{name}.dataset_names", names, "must be a non-empty list of dataset names")
    for dataset in names:
        if dataset not in dataset_info.get(name, {}):
            known = sorted(dataset_info.get(name, {}))
            raise ConfigError(f"{name}.dataset_names", dataset, f"not in dataset_info[{name!r}] (known: {known})")
    num_used = args.get("num_used_data")
    if (
        not isinstance(num_used, list)
        or len(num_used) != len(names)
        or not all(isinstance(n, int) and n > 0 for n in num_used)
    ):
        raise ConfigError(f"{name}.num_used_data", num_used, f"give one positive int per dataset name ({len(names)})")
    if "image_transform_args" not in args:
        raise ConfigError(f"{name}.image_transform_args", None, "required: the image transform sizes")
    for dataset in names:
        _register_storage_options(dataset_info, name, dataset)
    kwargs: dict[str, Any] = {
        "num_used_data": list(num_used),
        "transform": ImageTransform(
            **_check_transform_args(name, "image_transform_args", args["image_transform_args"])
        ),
        "data_dir_list": [_meta(dataset_info, name, d, "data_dir", info_base) for d in names],
    }
    if "file_order" in args:
        kwargs["file_order"] = args["file_order"]
    if issubclass(family, ParquetStandardIterableDataset):
        kwargs.update(_parquet_standard_kwargs(family, name, names, args, dataset_info, info_base))
    if issubclass(family, UnifiedEditIterableDataset):
        if "vit_image_transform_args" not in args:
            raise ConfigError(f"{name}.vit_image_transform_args", None, "required: the ViT transform sizes")
        kwargs["vit_transform"] = ImageTransform(
            **_check_transform_args(name, "vit_image_transform_args", args["vit_image_transform_args"])
        )
        kwargs["parquet_info"] = {}
        for dataset in names:
            path = _meta(dataset_info, name, dataset, "parquet_info_path", info_base)
            kwargs["parquet_info"].update(json.loads(storage.read_bytes(path)))
    if issubclass(family, SftJSONLIterableDataset):
        kwargs["jsonl_path_list"] = [_meta(dataset_info, name, d, "jsonl_path", info_base) for d in names]
        sampler_args = args.get("frame_sampler_args")
        kwargs["frame_sampler"] = FrameSampler(**sampler_args) if sampler_args is not None else None
        kwargs["shuffle_lines"] = bool(args.get("shuffle_lines", False))
        kwargs["shuffle_seed"] = int(args.get("shuffle_seed", 0))
    return GroupSpec(
        name=name,
        family=family,
        weight=float(args.get("weight", 0.0)),
        is_mandatory=bool(args.get("is_mandatory", False)),
        resume_data_status=bool(args.get("resume_data_status", True)),
        kwargs=kwargs,
    )


def _parquet_standard_kwargs(family, name, names, args, dataset_info, info_base) -> dict:
    """What a ParquetStandardIterableDataset subclass (a user's family, or `interleaved`)
    takes beyond the common kwargs; parquet_info and the ViT transform are optional."""
    kwargs: dict[str, Any] = {"parquet_info": {}}
    if "vit_image_transform_args" in args:
        vit_args = _check_transform_args(name, "vit_image_transform_args", args["vit_image_transform_args"])
        kwargs["vit_transform"] = ImageTransform(**vit_args)
    for dataset in names:
        path = _meta(dataset_info, name, dataset, "parquet_info_path", info_base, required=False)
        if path is not None:
            info = json.loads(storage.read_bytes(path))
            base = _meta(dataset_info, name, dataset, "data_dir", info_base)
            # keyed by file name relative to data_dir, or by full path
            kwargs["parquet_info"].update({storage.join(base, k) if "/" not in k else k: v for k, v in info.items()})
    if "segment_defaults" in args:
        kwargs["segment_defaults"] = args["segment_defaults"]
    if "frame_sampler_args" in args:
        kwargs["frame_sampler"] = FrameSampler(**args["frame_sampler_args"])
    consumed = {"vit_image_transform_args", "file_order", "segment_defaults", "frame_sampler_args"}
    for key in set(getattr(family, "GROUP_KEYS", ())) - consumed - COMMON_GROUP_KEYS:
        if key in args:  # a user family's own keys reach its constructor as keywords
            kwargs[key] = args[key]
    jsonl = [_meta(dataset_info, name, d, "jsonl_path", info_base, required=False) for d in names]
    if any(jsonl):
        if not all(jsonl) or not issubclass(family, _jsonl_capable()):
            raise ConfigError(
                f"dataset_info.{name}", [d for d, p in zip(names, jsonl) if not p],
                "give every dataset of the group a jsonl_path, or none (parquet shards in data_dir)",
            )  # fmt: skip
        kwargs["jsonl_path_list"] = jsonl
    return kwargs


def _jsonl_capable():
    from .families.interleaved import InterleavedIterableDataset

    return InterleavedIterableDataset


def parse_groups(grouped_datasets: Mapping, dataset_info: dict, info_base: str | None) -> list[GroupSpec]:
    if not grouped_datasets:
        raise ConfigError("grouped_datasets", grouped_datasets, "configure at least one group")
    groups = [parse_group(name, args, dataset_info, info_base) for name, args in grouped_datasets.items()]
    if sum(group.weight for group in groups) <= 0:
        weights = {group.name: group.weight for group in groups}
        raise ConfigError("weight", weights, "the group weights must sum to more than 0")
    return groups
