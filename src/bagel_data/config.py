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

from .errors import ConfigError
from .families.group_args import GroupArgs, path_exists
from .families.registry import (
    DATASET_REGISTRY,
    allowed_group_keys,
    entry_fields,
    group_fields,
    own_entry_keys,
    registered_entry_keys,
    resolve_family,
)
from .media.safe_read import check_image_formats
from .schema import (
    check_dataset_entry,
    check_dataset_info_group,
    check_group_args,
    check_group_weights,
)
from .schema.files import read_structured
from .schema.weights import WeightSchedule, parse_weight
from .sources import storage
from .sources.splits import data_dir_of

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
    if not path_exists(what, path):
        raise ConfigError(what, path, "the file does not exist")
    data = read_structured(path, what)
    if not isinstance(data, dict):
        raise ConfigError(what, path, "the file must hold a mapping at its top level")
    return data, None if storage.is_uri(path) else os.path.dirname(os.path.abspath(path))


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    """One checked group of `grouped_datasets`, with its family and resolved inputs."""

    name: str
    family: type
    weight: float | WeightSchedule  # a number, or a schedule (packing/schedule.py)
    is_mandatory: bool
    resume_data_status: bool
    kwargs: dict[str, Any]


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


def _dataset_entries(dataset_info: Mapping, group: str, names: list[str], family: type) -> dict[str, dict]:
    """The checked dataset_info entries of the datasets a group uses: every entry's keys and
    its family's own, checked by type; another family's key passes here to be named below."""
    entries = check_dataset_info_group(group, dataset_info.get(group, {}))
    for dataset in names:
        if dataset not in entries:
            raise ConfigError(
                f"{group}.dataset_names", dataset, f"not in dataset_info[{group!r}] (known: {sorted(entries)})"
            )
    fields = entry_fields(family)
    allowed = {*fields, *own_entry_keys(family), *registered_entry_keys()}
    return {dataset: check_dataset_entry(group, dataset, entries[dataset], fields, allowed) for dataset in names}


def parse_group(name: str, args: Mapping, dataset_info: dict, info_base: str | None) -> GroupSpec:
    """Check one group's config and gather what its family's constructor needs: the
    arguments every family takes here, the rest from the family (`family.group_kwargs`)."""
    family = resolve_family(name, args)
    args = check_group_args(name, args, allowed_group_keys(family), group_fields(family))
    names = list(args["dataset_names"])
    entries = _dataset_entries(dataset_info, name, names, family)
    _check_unused_entry_keys(family, name, names, entries)
    for dataset in names:
        _register_storage_options(entries[dataset], name, dataset)
    group = GroupArgs(name, args, tuple(names), entries, info_base)
    kwargs: dict[str, Any] = {
        "num_used_data": list(args["num_used_data"]),
        "transform": group.transform("image_transform_args"),
        "data_dir_list": [  # each with the files that are its dataset (split, data_files)
            data_dir_of(f"dataset_info.{name}.{dataset}", path, entries[dataset])
            for dataset, path in zip(names, group.paths("data_dir", "dir"))
        ],
    }
    if "file_order" in args:
        kwargs["file_order"] = args["file_order"]
    if "image_formats" in args:  # the default mode's allowlist, widened (media/safe_read.py)
        kwargs["image_formats"] = check_image_formats(f"{name}.image_formats", args["image_formats"])
    if args.get("allow_outside_root") or any(entries[d].get("allow_outside_root") for d in names):
        kwargs["allow_outside_root"] = True  # the opt-in past the roots (media/safe_read.py)
    kwargs.update(family.group_kwargs(group))
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
    unused = registered_entry_keys() - own_entry_keys(family)
    for dataset in names:
        given = sorted(unused & set(entries[dataset] or ()))
        if given:
            raise ConfigError(
                f"dataset_info.{name}.{dataset}",
                given,
                f"the {family.__name__} family does not read these keys; remove them",
            )


def parse_groups(grouped_datasets: Mapping, dataset_info: dict, info_base: str | None) -> list[GroupSpec]:
    if not grouped_datasets:
        raise ConfigError("grouped_datasets", grouped_datasets, "configure at least one group")
    groups = [parse_group(name, args, dataset_info, info_base) for name, args in grouped_datasets.items()]
    check_group_weights({group.name: group.weight for group in groups})
    return groups
