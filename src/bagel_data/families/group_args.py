"""One group's checked configuration, as a family reads what it needs from it.

`config.parse_group` checks the keys every group shares and gathers the arguments every
family takes; then it asks the family class for the rest: `family.group_kwargs(group)`,
with `group` a `GroupArgs`. A family declares there which of its `dataset_info` paths it
needs (and whether each is a file or a folder), its transforms and its own keys. The keys
it reads beyond every group's are its own `GROUP_FIELDS` and `DATASET_INFO_FIELDS` (the
`Field`s below are those several families read). Every mistake is a `ConfigError` naming
the key, the value and the fix.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ..media.images import ImageTransform
from ..media.video import FrameSampler
from ..schema.files import read_structured
from ..schema.kinds import AnyMapping, Field, Str
from ..schema.sections import FILE_ORDERS, GROUP_FIELDS
from ..sources import storage

# The group keys every family accepts; a family's own are its `GROUP_FIELDS`.
COMMON_GROUP_KEYS = frozenset(GROUP_FIELDS)

# Keys that several families read, each declared once here.
FILE_ORDER = Field(
    Str(FILE_ORDERS), "order of parquet files: by name, or the filesystem's listing (the reference's)", "sorted"
)
VIT_TRANSFORM = Field(
    AnyMapping("mapping (image transform)"), "the ViT resize of understood images (edit inputs); keys below"
)
FRAME_SAMPLER = Field(AnyMapping("mapping (frame sampler)"), "how frames are drawn from videos; keys below", None)
JSONL_PATH = Field(Str(path=True), "the JSONL file of the dataset's rows (VLM: its conversations)")
PARQUET_INFO_PATH = Field(Str(path=True), "the parquet_info JSON (parquet file -> num_row_groups)")


def path_exists(key: str, path: str) -> bool:
    try:
        return storage.exists(path)
    except (storage.StorageOptionsError, OSError, ValueError) as exc:  # a scheme no filesystem handles, a NUL
        raise ConfigError(key, path, str(exc)) from None


def folder_exists(key: str, path: str) -> bool:
    try:
        return storage.folder_exists(path)
    except (storage.StorageOptionsError, OSError, ValueError) as exc:  # no such bucket, no access
        raise ConfigError(key, path, str(exc)) from None


def _resolve(path: str, base: str | None) -> str:
    if base is None or storage.is_uri(path) or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(base, path))


def read_parquet_info(path: str, where: str) -> dict:
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


@dataclasses.dataclass(frozen=True)
class GroupArgs:
    """A group's checked keys (`args`), its datasets and their checked `dataset_info`
    entries; relative paths of a `dataset_info` file resolve against `info_base`."""

    name: str
    args: Mapping[str, Any]
    dataset_names: tuple[str, ...]
    entries: Mapping[str, Mapping]
    info_base: str | None

    def path(self, dataset: str, key: str, kind: str, required: bool = True) -> str | None:
        """The resolved path `key` of `dataset`, checked to exist and to be a `kind`
        ('dir' or 'file'); None when it is not given and not `required`."""
        where = f"dataset_info.{self.name}.{dataset}.{key}"
        value = self.entries[dataset].get(key)
        if value is None:
            if required:
                raise ConfigError(where, None, f"add the {key} of dataset {dataset!r}")
            return None
        value = _resolve(os.fspath(value), self.info_base)
        if kind == "dir" and storage.is_remote(value):
            # The folder's listing, which the family takes next: one per node, no probe.
            if not folder_exists(where, value):
                raise ConfigError(where, value, "no folder at this path (on a store: no object under this prefix)")
        elif not path_exists(where, value):
            raise ConfigError(where, value, "this path does not exist")
        if not storage.is_uri(value):
            if kind == "dir" and not os.path.isdir(value):
                raise ConfigError(
                    where, value, "must be a folder, but this is a file; give the folder that holds the data"
                )
            if kind == "file" and os.path.isdir(value):
                raise ConfigError(where, value, "must be a file, but this is a folder; give the file's path")
        return value

    def paths(self, key: str, kind: str, required: bool = True) -> list:
        """`path(dataset, key, kind, required)` of each dataset of the group, in order."""
        return [self.path(dataset, key, kind, required) for dataset in self.dataset_names]

    def parquet_info(self, dataset: str, required: bool = True) -> dict | None:
        """The `parquet_info_path` JSON of `dataset`; None when optional and not given."""
        path = self.path(dataset, "parquet_info_path", "file", required)
        if path is None:
            return None
        return read_parquet_info(path, f"dataset_info.{self.name}.{dataset}.parquet_info_path")

    def transform(self, key: str) -> ImageTransform:
        """The `ImageTransform` of the group key `key` (required)."""
        if self.args.get(key) is None:
            raise ConfigError(
                f"{self.name}.{key}",
                None,
                "required: the image transform sizes (max_image_size, min_image_size, image_stride)",
            )
        return ImageTransform(**self.args[key])

    def frame_sampler(self) -> FrameSampler | None:
        """The group's `frame_sampler_args` as a `FrameSampler`, None when not given."""
        sampler_args = self.args.get("frame_sampler_args")
        if sampler_args is None:
            return None
        try:
            return FrameSampler(**sampler_args)
        except ConfigError as exc:  # name the key where the user wrote it
            raise ConfigError(f"{self.name}.frame_sampler_args.{exc.key}", exc.value, exc.fix) from None

    def values(self, key: str, default: Any = None) -> list:
        """The `dataset_info` value `key` of each dataset of the group (checked by its
        family's `DATASET_INFO_FIELDS`), `default` where one leaves it out."""
        return [self.entries[dataset].get(key, default) for dataset in self.dataset_names]

    def given(self, *keys: str) -> dict:
        """The group keys among `keys` that the config sets, as they are."""
        return {key: self.args[key] for key in keys if key in self.args}
