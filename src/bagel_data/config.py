"""Reading and checking `grouped_datasets` and `dataset_info`, then building the families.

Every mistake is reported here, before any data is read, as a `ConfigError` naming the key,
the value and the fix. Both mappings may be given as dicts or as paths to YAML/JSON files;
relative paths inside a `dataset_info` file are taken relative to that file's folder.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from .config_files import read_structured
from .errors import ConfigError
from .families.edit import UnifiedEditIterableDataset
from .families.interleaved_base import ParquetStandardIterableDataset
from .families.registry import COMMON_GROUP_KEYS, DATASET_REGISTRY, allowed_group_keys, resolve_family
from .families.vlm import SftJSONLIterableDataset
from .media.images import ImageTransform
from .media.video import FrameSampler
from .schema import (
    check_dataset_entry,
    check_dataset_info_group,
    check_group_args,
    check_group_weights,
    check_transform_args,
)
from .schema.weights import WeightSchedule, parse_weight
from .sources import storage

# The registry lives with the families; re-exported here for existing imports.
ALLOWED_GROUP_KEYS = {family: allowed_group_keys(family) for family in DATASET_REGISTRY.values()}


def load_mapping(source: Mapping | str | os.PathLike | None, what: str) -> tuple[dict, str | None]:
    """(mapping, folder of the file it came from or None) from a dict or a YAML/JSON path."""
    if source is None:
        raise ConfigError(what, None, f"{what} is required: pass a dict or the path of a YAML/JSON file")
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source)), None
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigError(what, source, "pass a mapping or the path of a YAML/JSON file")
    path = os.fspath(source)
    if not _exists(what, path):
        raise ConfigError(what, path, "the file does not exist")
    data = read_structured(path, what)
    if not isinstance(data, dict):
        raise ConfigError(what, path, "the file must hold a mapping at its top level")
    return data, None if storage.is_uri(path) else os.path.dirname(os.path.abspath(path))


def _exists(key: str, path: str) -> bool:
    try:
        return storage.exists(path)
    except (storage.StorageOptionsError, OSError, ValueError) as exc:  # a scheme no filesystem handles, a NUL
        raise ConfigError(key, path, str(exc)) from None


def _resolve(path: str, base: str | None) -> str:
    if base is None or storage.is_uri(path) or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(base, path))


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    """One checked group of `grouped_datasets`, with its family and resolved inputs."""

    name: str
    family: type
    weight: float | WeightSchedule  # a number, or a schedule (packing/schedule.py)
    is_mandatory: bool
    resume_data_status: bool
    kwargs: dict[str, Any]


def _check_transform_args(group: str, key: str, args: object) -> dict:
    """The checked keyword arguments of an `ImageTransform` (kept for existing callers)."""
    return check_transform_args(f"{group}.{key}", args)


def _meta(entries: dict, group: str, name: str, key: str, base: str | None, kind: str, required: bool = True):
    """The resolved path `key` of dataset `name`, checked to exist and to be a `kind` ('dir' or 'file')."""
    where = f"dataset_info.{group}.{name}.{key}"
    value = entries[name].get(key)
    if value is None:
        if required:
            raise ConfigError(where, None, f"add the {key} of dataset {name!r}")
        return None
    value = _resolve(os.fspath(value), base)
    if not _exists(where, value):
        raise ConfigError(where, value, "this path does not exist")
    if not storage.is_uri(value):
        if kind == "dir" and not os.path.isdir(value):
            raise ConfigError(where, value, "must be a folder, but this is a file; give the folder that holds the data")
        if kind == "file" and os.path.isdir(value):
            raise ConfigError(where, value, "must be a file, but this is a folder; give the file's path")
    return value


def _parquet_info(path: str, where: str) -> dict:
    """The parquet_info JSON at `path`: parquet file -> {"num_row_groups": N, ...}."""
    info = read_structured(path, where, json_only=True)
    if not isinstance(info, dict):
        raise ConfigError(where, path, "must hold a JSON object: parquet file -> {num_row_groups: N}")
    for file, meta in info.items():
        count = meta.get("num_row_groups") if isinstance(meta, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigError(
                where, path, f"entry {file!r} = {meta!r}: each value must be an object with an int num_row_groups >= 0"
            )
    return info


_URI_KEYS = ("data_dir", "jsonl_path", "parquet_info_path")


def _register_storage_options(entry: dict, group: str, name: str) -> None:
    """Give the buckets of one dataset's URIs the filesystem options of its entry."""
    options = entry.get("storage_options")
    if options is None:
        return
    key = f"dataset_info.{group}.{name}.storage_options"
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


def _dataset_entries(dataset_info: Mapping, group: str, names: list[str]) -> dict[str, dict]:
    """The checked dataset_info entries of the datasets a group uses."""
    entries = check_dataset_info_group(group, dataset_info.get(group, {}))
    for dataset in names:
        if dataset not in entries:
            raise ConfigError(
                f"{group}.dataset_names", dataset, f"not in dataset_info[{group!r}] (known: {sorted(entries)})"
            )
    return {dataset: check_dataset_entry(group, dataset, entries[dataset]) for dataset in names}


def _transform(name: str, key: str, args: Mapping) -> ImageTransform:
    if args.get(key) is None:
        raise ConfigError(
            f"{name}.{key}", None, "required: the image transform sizes (max_image_size, min_image_size, image_stride)"
        )
    return ImageTransform(**args[key])


def _frame_sampler(name: str, sampler_args: Mapping | None) -> FrameSampler | None:
    if sampler_args is None:
        return None
    try:
        return FrameSampler(**sampler_args)
    except ConfigError as exc:  # name the key where the user wrote it
        raise ConfigError(f"{name}.frame_sampler_args.{exc.key}", exc.value, exc.fix) from None


def parse_group(name: str, args: Mapping, dataset_info: dict, info_base: str | None) -> GroupSpec:
    """Check one group's config and gather what its family's constructor needs."""
    family = resolve_family(name, args)
    args = check_group_args(name, args, allowed_group_keys(family))
    names = list(args["dataset_names"])
    entries = _dataset_entries(dataset_info, name, names)
    _check_unused_entry_keys(family, name, names, entries)
    for dataset in names:
        _register_storage_options(entries[dataset], name, dataset)
    kwargs: dict[str, Any] = {
        "num_used_data": list(args["num_used_data"]),
        "transform": _transform(name, "image_transform_args", args),
        "data_dir_list": [_meta(entries, name, d, "data_dir", info_base, "dir") for d in names],
    }
    if "file_order" in args:
        kwargs["file_order"] = args["file_order"]
    for key in ("image_column", "caption_column"):  # a T2I group's own table (families/t2i.py)
        if key in args:
            kwargs[key] = args[key]
    if args.get("allow_outside_root") or any(entries[d].get("allow_outside_root") for d in names):
        kwargs["allow_outside_root"] = True  # the opt-in past the roots (media/safe_read.py)
    if issubclass(family, ParquetStandardIterableDataset):
        kwargs.update(_parquet_standard_kwargs(family, name, names, args, entries, info_base))
    if issubclass(family, UnifiedEditIterableDataset):
        kwargs["vit_transform"] = _transform(name, "vit_image_transform_args", args)
        kwargs["parquet_info"] = {}
        for dataset in names:
            path = _meta(entries, name, dataset, "parquet_info_path", info_base, "file")
            kwargs["parquet_info"].update(_parquet_info(path, f"dataset_info.{name}.{dataset}.parquet_info_path"))
    if issubclass(family, SftJSONLIterableDataset):
        kwargs["jsonl_path_list"] = [_meta(entries, name, d, "jsonl_path", info_base, "file") for d in names]
        kwargs["frame_sampler"] = _frame_sampler(name, args.get("frame_sampler_args"))
        kwargs["shuffle_lines"] = args.get("shuffle_lines", False)
        kwargs["shuffle_seed"] = args.get("shuffle_seed", 0)
    return GroupSpec(
        name=name,
        family=family,
        weight=parse_weight(f"{name}.weight", args.get("weight", 0.0)),
        is_mandatory=args.get("is_mandatory", False),
        resume_data_status=args.get("resume_data_status", True),
        kwargs=kwargs,
    )


def _check_unused_entry_keys(family, name: str, names: list[str], entries: dict) -> None:
    """A dataset_info key the group's family never reads is a mistake (a T2I group given a
    `jsonl_path` would silently read its parquet shards instead)."""
    unused = set()
    if not issubclass(family, (SftJSONLIterableDataset, ParquetStandardIterableDataset)):
        unused.add("jsonl_path")
    if not issubclass(family, (UnifiedEditIterableDataset, ParquetStandardIterableDataset)):
        unused.add("parquet_info_path")
    for dataset in names:
        given = sorted(unused & set(entries[dataset] or ()))
        if given:
            raise ConfigError(
                f"dataset_info.{name}.{dataset}",
                given,
                f"the {family.__name__} family does not read these keys; remove them",
            )


def _parquet_standard_kwargs(family, name, names, args, entries, info_base) -> dict:
    """What a ParquetStandardIterableDataset subclass (a user's family, or `interleaved`)
    takes beyond the common kwargs; parquet_info and the ViT transform are optional."""
    kwargs: dict[str, Any] = {"parquet_info": {}}
    if args.get("vit_image_transform_args") is not None:
        kwargs["vit_transform"] = _transform(name, "vit_image_transform_args", args)
    for dataset in names:
        path = _meta(entries, name, dataset, "parquet_info_path", info_base, "file", required=False)
        if path is not None:
            info = _parquet_info(path, f"dataset_info.{name}.{dataset}.parquet_info_path")
            base = _meta(entries, name, dataset, "data_dir", info_base, "dir")
            # keyed by file name relative to data_dir, or by full path
            kwargs["parquet_info"].update({storage.join(base, k) if "/" not in k else k: v for k, v in info.items()})
    if "segment_defaults" in args:
        kwargs["segment_defaults"] = args["segment_defaults"]
    if "frame_sampler_args" in args:
        kwargs["frame_sampler"] = _frame_sampler(name, args["frame_sampler_args"])
    consumed = {"vit_image_transform_args", "file_order", "segment_defaults", "frame_sampler_args"}
    for key in set(getattr(family, "GROUP_KEYS", ())) - consumed - COMMON_GROUP_KEYS:
        if key in args:  # a user family's own keys reach its constructor as keywords
            kwargs[key] = args[key]
    jsonl = [_meta(entries, name, d, "jsonl_path", info_base, "file", required=False) for d in names]
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
    check_group_weights({group.name: group.weight for group in groups})
    return groups
