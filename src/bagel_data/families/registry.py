"""Which family class builds a group: `DATASET_REGISTRY`, or the group's own `dataset_class`.

A group of `grouped_datasets` is built by `DATASET_REGISTRY[group name]`, as in the
reference; a training script may add its own class (`DATASET_REGISTRY["my_group"] =
MyFamily`) before building the dataset. A YAML group can instead name its class,
`dataset_class: "my_package.my_module:MyFamily"`, imported by name so it works in spawned
DataLoader workers and in `bagel-data run / validate / inspect` alike.

Each family declares its own keys beside its code: the group keys it accepts beyond every
group's (`GROUP_FIELDS`) and the `dataset_info` keys it reads beyond every entry's
(`DATASET_INFO_FIELDS`), each a schema `Field`. This module gathers them for the config
checks (`config.py`) and the generated page (`tools/schema_doc.py`); a family of a user's
may still name keys without describing them (`GROUP_KEYS`, `DATASET_INFO_KEYS`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from ..errors import ConfigError
from ..schema.kinds import Field, did_you_mean
from ..schema.sections import DATASET_INFO_FIELDS, GROUP_FIELDS
from .base import DistributedIterableDataset
from .edit import UnifiedEditIterableDataset
from .interleaved import InterleavedIterableDataset
from .interleaved_base import InterleavedBaseIterableDataset
from .parquet_standard import ParquetStandardIterableDataset
from .t2i import T2IIterableDataset
from .vlm import SftJSONLIterableDataset

DATASET_REGISTRY: dict[str, type] = {
    "t2i_pretrain": T2IIterableDataset,
    "vlm_sft": SftJSONLIterableDataset,
    "unified_edit": UnifiedEditIterableDataset,
    "interleaved": InterleavedIterableDataset,
}


_BASE_FIX = (
    "subclass bagel_data.InterleavedBaseIterableDataset and bagel_data.ParquetStandardIterableDataset "
    "(or another bagel_data family) and implement parse_row(row)"
)


def group_fields(family: type) -> dict[str, Field]:
    """The group keys `family` accepts and describes: every group's, then its own."""
    return {**GROUP_FIELDS, **getattr(family, "GROUP_FIELDS", {})}


def allowed_group_keys(family: type) -> frozenset:
    """The group keys `family` accepts: every group's, its own, and any it names only."""
    return frozenset(group_fields(family)) | frozenset(getattr(family, "GROUP_KEYS", ()))


def entry_fields(family: type) -> dict[str, Field]:
    """The `dataset_info` keys `family` reads and describes: every entry's, then its own."""
    return {**DATASET_INFO_FIELDS, **getattr(family, "DATASET_INFO_FIELDS", {})}


def own_entry_keys(family: type) -> frozenset:
    """The `dataset_info` keys `family` reads beyond every entry's."""
    return frozenset(getattr(family, "DATASET_INFO_FIELDS", ())) | frozenset(getattr(family, "DATASET_INFO_KEYS", ()))


def registered_entry_keys() -> frozenset:
    """The `dataset_info` keys some registered family reads beyond every entry's: given to
    a family that does not read it, one is a mistake (a T2I group given a `jsonl_path`
    would read its parquet shards instead), named as such rather than as unknown."""
    return frozenset().union(*(own_entry_keys(family) for family in DATASET_REGISTRY.values()))


def families_reading(section: str) -> dict[str, list[tuple[str, Field]]]:
    """Each family key of `section` ("group" or "dataset_info") with the (group, Field) of
    every registered family that declares it, in the registry's order; a parse_row family
    of a user's counts as the group "user families"."""
    attribute = "GROUP_FIELDS" if section == "group" else "DATASET_INFO_FIELDS"
    found: dict[str, list[tuple[str, Field]]] = {}
    for group, family in [*DATASET_REGISTRY.items(), ("user families", ParquetStandardIterableDataset)]:
        for key, field in getattr(family, attribute).items():
            found.setdefault(key, []).append((group, field))
    return found


def import_family(group: str, path: object) -> type:
    """The class named `"package.module:Class"`; a ConfigError naming the group otherwise."""
    key = f"grouped_datasets.{group}.dataset_class"
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise ConfigError(key, path, 'write it as "package.module:ClassName"')
    module_name, class_name = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            key, path, f"cannot import {module_name!r} ({exc}); install the package or put it on PYTHONPATH"
        ) from None
    except Exception as exc:  # the module itself fails while importing: the user's code, not ours
        detail = f"{type(exc).__name__}: {exc}"[:200]
        raise ConfigError(key, path, f"importing {module_name!r} raised {detail}; fix that module") from None
    try:
        return getattr(module, class_name)
    except AttributeError:
        raise ConfigError(key, path, f"module {module_name!r} has no {class_name!r}; check the class name") from None


def _unimplemented(family: type) -> list[str]:
    """The hooks a family must implement that `family` leaves to a base class (a base class
    itself, or a subclass that is not finished): it could not even be constructed."""
    hooks: list[tuple[str, type]] = [
        ("get_data_paths", DistributedIterableDataset),
        ("_unit_samples", DistributedIterableDataset),
    ]
    if issubclass(family, ParquetStandardIterableDataset):
        hooks.append(("parse_row", ParquetStandardIterableDataset))
    return [name for name, base in hooks if getattr(family, name) is getattr(base, name)]


def check_family(group: str, family: object, where: str) -> type[DistributedIterableDataset]:
    shown = family.__qualname__ if isinstance(family, type) else repr(family)
    if family is InterleavedBaseIterableDataset:  # the plan builders alone, a base a family mixes in
        raise _base_class_error(group, where, shown, ["get_data_paths", "_unit_samples"])
    if not isinstance(family, type) or not issubclass(family, DistributedIterableDataset):
        raise ConfigError(where, shown, f"group {group!r}: the class must {_BASE_FIX}")
    missing = _unimplemented(family)
    if missing:
        raise _base_class_error(group, where, shown, missing)
    return family


def _base_class_error(group: str, where: str, shown: str, missing: list[str]) -> ConfigError:
    families = ", ".join(f"{name}: {cls.__name__}" for name, cls in sorted(DATASET_REGISTRY.items()))
    return ConfigError(
        where,
        shown,
        f"group {group!r}: {shown.rsplit('.', 1)[-1]} is a base class, not a family (it does not implement "
        f"{', '.join(missing)}); use a family ({families}) or {_BASE_FIX}",
    )


def resolve_family(group: str, args: object) -> type[DistributedIterableDataset]:
    """The family class of `group`: its `dataset_class`, else `DATASET_REGISTRY[group]`."""
    if isinstance(args, Mapping) and args.get("dataset_class") is not None:
        path = args["dataset_class"]
        return check_family(group, import_family(group, path), f"grouped_datasets.{group}.dataset_class")
    family = DATASET_REGISTRY.get(group)
    if family is None:
        raise ConfigError(
            "grouped_datasets",
            group,
            f"unknown group{did_you_mean([str(group)], DATASET_REGISTRY)}; use one of {sorted(DATASET_REGISTRY)}, "
            "register your class "
            f"(DATASET_REGISTRY[{group!r}] = MyFamily) or give the group a "
            'dataset_class: "package.module:MyFamily"',
        )
    return check_family(group, family, f"DATASET_REGISTRY[{group!r}]")
