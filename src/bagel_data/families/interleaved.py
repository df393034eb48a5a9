"""Interleaved documents without code: ordered text / image / video segments with roles.

A document (a parquet row, or a JSONL line for small sets) holds `segments`, each
`{"type": "text" | "image" | "video", ...}` with optional role flags: `supervised` (text
loss), `understood` (ViT), `conditioned` (VAE), `generated` (image loss) and `cfg` (CFG
dropout may drop it). An image or video segment that sets none of its roles takes them
from the group's `segment_defaults` (one that sets some has exactly those); `supervised`
and `cfg` left out (or null) take the group's defaults too.
Format: docs/formats/interleaved.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import ClassVar

import pyarrow as pa

from ..errors import ConfigError, SkipReason, VideoDecodeError
from ..media.safe_read import check_video_path, read_media
from ..schema.kinds import AnyMapping, Field, did_you_mean
from ..sources import storage
from ..sources.jsonl import JsonlIndex
from .base import DistributedIterableDataset
from .group_args import FRAME_SAMPLER, JSONL_PATH
from .interleaved_base import InterleavedBaseIterableDataset
from .parquet_standard import (
    ParquetStandardIterableDataset,
    Row,
    hold_parquet_rows,
    other_draw_lengths,
    parquet_group_kwargs,
    parsed,
    parsed_unit_samples,
    parsed_worst_case_rows,
    planned_length,
    row_group_units,
)
from .unit_kinds import JsonlLines

SEGMENT_TYPE = pa.struct(
    [
        ("type", pa.string()),
        ("text", pa.string()),
        ("image", pa.binary()),
        ("path", pa.string()),
        ("frames", pa.list_(pa.binary())),
        ("frame_indexes", pa.list_(pa.int64())),
        ("understood", pa.bool_()),
        ("conditioned", pa.bool_()),
        ("generated", pa.bool_()),
        ("supervised", pa.bool_()),
        ("cfg", pa.bool_()),
    ]
)
INTERLEAVED_SCHEMA = pa.schema([("segments", pa.list_(SEGMENT_TYPE))])
TEXT_LOSS_RULES = ("all", "none", "after_first_image", "last")
IMAGE_ROLES = ("understood", "conditioned", "generated")
DEFAULTS = {
    "text_loss": "all",
    "first_image": ["understood", "conditioned"],
    "later_images": ["generated", "conditioned", "understood"],
    "video": "generated",
    "cfg": True,
}


def check_segment_defaults(group: str, given: object) -> dict:
    """The group's defaults merged over DEFAULTS; a ConfigError names any bad entry."""
    key = f"{group}.segment_defaults"
    if given is None:
        return dict(DEFAULTS)
    if not isinstance(given, Mapping):
        raise ConfigError(key, given, f"must be a mapping with some of {sorted(DEFAULTS)}")
    unknown = set(given) - set(DEFAULTS)
    if unknown:
        shown = sorted(map(str, unknown))
        raise ConfigError(key, shown, f"unknown key(s){did_you_mean(shown, DEFAULTS)}; allowed: {sorted(DEFAULTS)}")
    merged = {**DEFAULTS, **given}
    if merged["text_loss"] not in TEXT_LOSS_RULES:
        raise ConfigError(f"{key}.text_loss", merged["text_loss"], f"use one of {TEXT_LOSS_RULES}")
    for name in ("first_image", "later_images"):
        roles = merged[name]
        if not isinstance(roles, list) or not roles or not set(roles) <= set(IMAGE_ROLES):
            raise ConfigError(f"{key}.{name}", roles, f"a non-empty list of {IMAGE_ROLES}")
    if merged["video"] not in ("generated", "conditioned"):
        raise ConfigError(f"{key}.video", merged["video"], "use 'generated' or 'conditioned'")
    if not isinstance(merged["cfg"], bool):
        raise ConfigError(f"{key}.cfg", merged["cfg"], "true or false")
    return merged


def _flag(segment: Mapping, name: str, default: bool) -> bool:
    value = segment.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"segment flag {name!r} must be true, false or null, got {value!r}")
    return value


def text_losses(segments: list, rule: str) -> list[bool]:
    """The default `supervised` of each segment under a group's `text_loss` rule."""
    kinds = [segment.get("type") if isinstance(segment, Mapping) else None for segment in segments]
    texts = [i for i, kind in enumerate(kinds) if kind == "text"]
    visuals = [i for i, kind in enumerate(kinds) if kind in ("image", "video")]
    if rule == "all":
        chosen = set(texts)
    elif rule == "after_first_image":
        chosen = {i for i in texts if visuals and i > visuals[0]}
    elif rule == "last":
        chosen = set(texts[-1:])
    else:
        chosen = set()
    return [i in chosen for i in range(len(segments))]


class _FamilyPlan(InterleavedBaseIterableDataset):
    """The plan builders (`init_data`, `add_*`) over a family that holds them rather than
    inheriting them: every attribute they read is the family's."""

    def __init__(self, family: InterleavedIterableDataset):
        self.family = family

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "family":  # pickling and copying look these up
            raise AttributeError(name)
        return getattr(self.family, name)


class InterleavedIterableDataset(DistributedIterableDataset):
    """Interleaved text-image-video documents from parquet (`segments` column) or JSONL.

    It reads parquet as a parse_row family does (`families/parquet_standard.py`), its own
    `parse_row` builds each document with the plan builders it holds (`self.plan`)."""

    GROUP_FIELDS: ClassVar[dict[str, Field]] = {
        **ParquetStandardIterableDataset.GROUP_FIELDS,
        "segment_defaults": Field(
            AnyMapping("mapping (segment roles)"), "roles of segments that set none (docs/formats/interleaved.md)"
        ),
        "frame_sampler_args": FRAME_SAMPLER,
    }
    DATASET_INFO_FIELDS: ClassVar[dict[str, Field]] = {
        **ParquetStandardIterableDataset.DATASET_INFO_FIELDS,
        "jsonl_path": JSONL_PATH,
    }

    @classmethod
    def group_kwargs(cls, group):
        """Parquet shards in data_dir, or JSONL documents when every dataset has a jsonl_path."""
        kwargs = parquet_group_kwargs(cls, group)
        jsonl = group.paths("jsonl_path", "file", required=False)
        if any(jsonl):
            if not all(jsonl):
                raise ConfigError(
                    f"dataset_info.{group.name}", [d for d, p in zip(group.dataset_names, jsonl) if not p],
                    "give every dataset of the group a jsonl_path, or none (parquet shards in data_dir)",
                )  # fmt: skip
            kwargs["jsonl_path_list"] = jsonl
        return kwargs

    columns = ("segments",)
    worst_case_draws = ParquetStandardIterableDataset.worst_case_draws

    def __init__(
        self, dataset_name, transform, tokenizer, vit_transform=None, data_dir_list=(), num_used_data=(),
        parquet_info=None, local_rank=0, world_size=1, num_workers=8, data_status=None, *,
        file_order: str = "sorted", jsonl_path_list=None, segment_defaults=None, frame_sampler=None,
        **options,
    ):  # fmt: skip
        self.jsonl_path_list = list(jsonl_path_list) if jsonl_path_list else None
        self.segment_defaults = check_segment_defaults(dataset_name, segment_defaults)
        uses_vit = "understood" in self.segment_defaults["first_image"] + self.segment_defaults["later_images"]
        if vit_transform is None and uses_vit:
            raise ConfigError(
                f"{dataset_name}.vit_image_transform_args",
                None,
                "segment_defaults make images understood (ViT): add vit_image_transform_args, "
                "or drop 'understood' from first_image / later_images",
            )
        self.frame_sampler = frame_sampler
        super().__init__(dataset_name, local_rank, world_size, num_workers, **options)
        hold_parquet_rows(self, transform, tokenizer, vit_transform, data_dir_list, data_status, file_order)
        self.plan = _FamilyPlan(self)
        self.np_rng = None  # the row's generator while `parse_row` runs (`parsed`)
        self.data_paths = self.get_data_paths(data_dir_list, num_used_data, parquet_info or {})
        self.set_epoch()

    # -- JSONL units (one document per line) ----------------------------------------------
    def get_data_paths(self, data_dir_list, num_used_data, parquet_info):
        if self.jsonl_path_list is None:
            return row_group_units(self, data_dir_list, num_used_data, parquet_info)
        index = JsonlIndex(self.jsonl_path_list, list(data_dir_list), list(num_used_data))
        self.units.kind = JsonlLines(index)  # JSONL lines read inline
        return index

    def _unit_samples(self, unit_id, pass_index, start, log, single=False):
        if self.jsonl_path_list is None:
            self._image_root = self._shard_folder(unit_id)
            yield from parsed_unit_samples(self, unit_id, pass_index, start, log, single)
            return
        line = int(self.units.unit(unit_id))
        location = self.data_paths.location(line)
        try:
            document = json.loads(self.data_paths.read_line(line))
        except ValueError as exc:
            log.skip(SkipReason.JSON_INVALID, location, str(exc))
            return
        if not isinstance(document, dict):
            log.skip(SkipReason.SCHEMA, location, "a document must be a JSON object with 'segments'")
            return
        self._image_root = self.data_paths.image_dir(line)
        draw = self.units.row_random(unit_id, pass_index)
        builder = parsed(self, Row(document, line), draw.rng, location, log)
        if builder is not None:
            yield (), builder, draw.state

    def worst_case_rows(self, shard, index, unit_id, log):
        if self.jsonl_path_list is None:
            self._image_root = self._shard_folder(unit_id)
            yield from parsed_worst_case_rows(self, unit_id, log)
            return
        # A line is one document: the run's own draw (its skips counted in `log`), then
        # validate's extra draws over the same document.
        firsts = [found[1] for found in self._unit_samples(unit_id, 0, (), log)]
        if not firsts:
            return
        line = int(self.units.unit(unit_id))
        location = self.data_paths.location(line)
        others = other_draw_lengths(self, Row(json.loads(self.data_paths.read_line(line)), line), location, unit_id)
        yield location, max([planned_length(firsts[0]), *others])

    def read_source(self):
        return self.units.kind.read_source(self.units.unit, lambda names: list(self.columns))  # JSONL: inline

    def _shard_folder(self, unit_id: int) -> str:
        """The folder of a unit's parquet shard: the paths in it are relative to it."""
        return self.units.unit(unit_id)[0].rsplit("/", 1)[0]

    # -- one document -----------------------------------------------------------------------
    def _media(self, value):
        """Encoded bytes as they are; a path read from under the dataset's folder."""
        if isinstance(value, str):
            path = value if storage.is_uri(value) or value.startswith("/") else storage.join(self._image_root, value)
            return read_media(path, self.plan.media_roots(), self.allow_outside_root)
        return value

    def parse_row(self, row):
        segments = row["segments"]
        if not isinstance(segments, list) or not segments:
            raise ValueError("'segments' must be a non-empty list")
        defaults = self.segment_defaults
        losses = text_losses(segments, defaults["text_loss"])
        visuals = [i for i, s in enumerate(segments) if isinstance(s, Mapping) and s.get("type") in ("image", "video")]
        data = self.plan.init_data()
        for index, segment in enumerate(segments):
            if not isinstance(segment, Mapping):
                raise ValueError(f"segment {index} is not an object")
            cfg = _flag(segment, "cfg", defaults["cfg"])
            kind = segment.get("type")
            if kind == "text":
                if not isinstance(segment.get("text"), str):
                    raise ValueError(f"text segment {index} has no 'text' string")
                self.plan.add_text(data, segment["text"], _flag(segment, "supervised", losses[index]), cfg)
            elif kind == "image":
                self._add_image_segment(data, segment, index, index == visuals[0], index == len(segments) - 1, cfg)
            elif kind == "video":
                self._add_video_segment(data, segment, index, cfg)
            else:
                raise ValueError(f"segment {index} has type {kind!r}; use 'text', 'image' or 'video'")
        if not any(item["loss"] for item in data["sequence_plan"]):
            raise ValueError("no segment is supervised or generated, so the document trains nothing")
        return data

    def _add_image_segment(self, data, segment, index, first, last, cfg):
        if any(segment.get(role) is not None for role in IMAGE_ROLES):  # the segment's own roles
            flags = {role: _flag(segment, role, False) for role in IMAGE_ROLES}
        else:
            roles = self.segment_defaults["first_image" if first else "later_images"]
            flags = {role: role in roles for role in IMAGE_ROLES}
            if last and flags["generated"]:
                flags["conditioned"] = flags["understood"] = False  # nothing follows to attend to them
        source = segment.get("image") if segment.get("image") is not None else segment.get("path")
        if source is None:
            raise ValueError(f"image segment {index} has neither 'image' bytes nor a 'path'")
        if not any(flags.values()):
            raise ValueError(f"image segment {index} has no role (understood, conditioned or generated)")
        image = self._media(source)
        self.plan.add_image(data, image, flags["generated"], flags["conditioned"], flags["understood"], cfg)

    def _add_video_segment(self, data, segment, index, cfg):
        default = self.segment_defaults["video"]
        if segment.get("generated") is not None or segment.get("conditioned") is not None:
            default = None  # the segment's own roles replace the default
        generated = _flag(segment, "generated", default == "generated")
        conditioned = _flag(segment, "conditioned", default == "conditioned")
        if generated == conditioned:
            raise ValueError(f"video segment {index} must be exactly one of generated or conditioned")
        if segment.get("frames"):
            frames = [self._media(frame) for frame in segment["frames"]]
        elif segment.get("path"):
            path = segment["path"]
            if self.frame_sampler is None:  # only this document needs one: a counted skip, not a stop mid-epoch
                raise VideoDecodeError(path, f"the group {self.dataset_name} has no frame_sampler_args")
            full = path if storage.is_uri(path) or path.startswith("/") else storage.join(self._image_root, path)
            frames = self.frame_sampler(
                check_video_path(full, self.plan.media_roots(), self.allow_outside_root), self.np_rng
            )
        else:
            raise ValueError(f"video segment {index} has neither 'frames' nor a 'path'")
        indexes = segment.get("frame_indexes") or list(range(len(frames)))
        self.plan.add_video(data, frames, indexes, generated, conditioned, cfg)
