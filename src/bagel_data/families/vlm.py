"""VLM supervised fine-tuning: JSONL conversations with images or video frames.

Units are JSONL lines. A sample is the conversation's turns as text items (answers carry
the loss) with ViT image items where `<image>` stands. Rows whose placeholders do not match
their images, or that have no answer, are skipped with a named reason instead of producing
an inconsistent plan. Position of a sample: the row's index in this worker's list.
"""

from __future__ import annotations

import dataclasses
import json
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, RowDropped, SkipReason
from ..media.images import ImageTransform, image_tokens
from ..media.safe_read import NotRegularFileError, OutsideRootError, check_video_path, read_media
from ..media.video import VideoDecodeError
from ..media.video_reference import read_reference_frames
from ..sample import SampleBuilder
from ..schema.kinds import Bool, Field, Int
from ..sources import storage
from ..sources.json_arrays import is_json_array, jsonl_copy
from ..sources.jsonl import JsonlIndex
from .base import DistributedIterableDataset
from .conversation import (
    check_conversations,
    conversation_to_elements,
    count_image_tags,
    expand_video_tag,
    expand_video_tag_first_turn,
)
from .group_args import FRAME_SAMPLER, JSONL_PATH
from .media import DECODE_ERRORS, FamilyMedia, skip_reason
from .reads import RowSource
from .samples import guarded
from .unit_kinds import JsonlLines
from .worst_case import vlm_worst_length

# What the read-ahead counts for a row before it is read: its line and a few images.
ROW_ESTIMATE = 1 << 20


def check_image_items(elements: list, num_images: int) -> None:
    """compat: the reference gates each `<image>` by its index within its turn, so several
    turns can ask for more images than the row has; it then crashes while packing."""
    wanted = sum(1 for element in elements if element["type"] == "image")
    if wanted > num_images:
        raise RowDropped(
            SkipReason.IMAGE_ITEMS_EXCEED_IMAGES,
            f"the turns' <image> tags make {wanted} image items for {num_images} image(s)",
        )


class SftJSONLIterableDataset(DistributedIterableDataset):
    """Iterable over conversation JSONL rows where each row may reference images."""

    GROUP_FIELDS: ClassVar[dict[str, Field]] = {
        "frame_sampler_args": FRAME_SAMPLER,
        "shuffle_lines": Field(
            Bool(), "shuffle the JSONL lines once, reproducibly, before taking num_used_data", False
        ),
        "shuffle_seed": Field(Int(), "seed of that shuffle", 0),
    }
    DATASET_INFO_FIELDS: ClassVar[dict[str, Field]] = {"jsonl_path": dataclasses.replace(JSONL_PATH, required=True)}
    IMAGE_TRANSFORM_KIND = "vit"  # its images are understood, never generated

    @classmethod
    def group_kwargs(cls, group):
        return {
            "jsonl_path_list": group.paths("jsonl_path", "file"),
            "frame_sampler": group.frame_sampler(),
            "shuffle_lines": group.args.get("shuffle_lines", False),
            "shuffle_seed": group.args.get("shuffle_seed", 0),
        }

    def __init__(
        self,
        dataset_name,
        transform: ImageTransform,
        tokenizer,
        frame_sampler,
        jsonl_path_list,
        data_dir_list,
        num_used_data,
        local_rank=0,
        world_size=1,
        num_workers=8,
        data_status=None,
        shuffle_lines=False,
        shuffle_seed=0,
        **options,
    ):
        # `options`: the base class's keyword-only settings (compat, strict, max_consecutive_failures).
        super().__init__(dataset_name, local_rank, world_size, num_workers, **options)
        self.transform = transform
        self.media = FamilyMedia((transform,), self.policy, self.image_formats)
        self.tokenizer = tokenizer
        self.frame_sampler = frame_sampler
        self.data_status = data_status
        self.asked_num_used_data = list(num_used_data)  # as configured: lines are never repeated to reach it
        self.data_paths = self.get_data_paths(
            jsonl_path_list, data_dir_list, num_used_data, shuffle_lines, shuffle_seed
        )
        self.set_epoch()

    def get_data_paths(self, jsonl_path_list, data_dir_list, num_used_data, shuffle_lines, shuffle_seed):
        # A LLaVA-style .json array is read through its JSONL copy (sources/json_arrays.py).
        arrays = [path if is_json_array(path) else None for path in jsonl_path_list]
        paths = [jsonl_copy(path) if array else path for path, array in zip(jsonl_path_list, arrays)]
        index = JsonlIndex(paths, data_dir_list, num_used_data, shuffle_lines, shuffle_seed, shown_paths=arrays)
        if len(index) == 0:  # else the unit check would ask for a larger num_used_data
            raise ConfigError(
                f"{self.dataset_name}.jsonl_path",
                list(jsonl_path_list),
                "the JSONL file(s) hold no lines (or num_used_data is 0); point jsonl_path at the data",
            )
        self.units.kind = JsonlLines(index, self.asked_num_used_data)  # a unit is a line index
        return index

    def change_format(self, data, num_images):
        """A row's conversation as the reference's element list (text / image), `num_images` images."""
        return conversation_to_elements(data["conversations"], num_images)

    def data_index(self, position):
        return position[0]  # the reference's position is the row's index in the worker's list

    def _unit_samples(self, unit_id, pass_index, start, log, single=False):
        line_id = int(self.units.unit(unit_id))
        location = self.data_paths.location(line_id)
        draw = self.units.row_random(unit_id, pass_index)
        builder = guarded(log, location, self._build_or_skip, line_id, draw.rng, log, location)
        if builder is not None:
            yield (), builder, draw.state

    def worst_case_rows(self, shard, index, unit_id, log):
        """Each row's sample; a video row at the frame count that makes it longest."""
        for sample in self.unit_samples(shard, index, unit_id, log):
            yield self.row_location(sample["row_key"]), vlm_worst_length(self, sample)

    # -- reads, ahead of the stream when a read-ahead runs (families/reads.py) --------------
    # A row's line and its image files are one task: its reads run in order on one thread,
    # rows in parallel. Its errors are kept and raised where the inline read would raise.
    # The row's fetched media are the thread's (`thread_state`): a resume rebuilds rows on
    # several threads at once.
    parallel_rebuild = True

    def read_source(self):
        return RowSource(lambda unit_id: int(self.units.unit(unit_id)), self._fetch_row, ROW_ESTIMATE)

    def _fetch_row(self, line_id: int) -> tuple[bytes, dict]:
        line = self._read_line(line_id)
        media: dict = {}
        try:
            row = json.loads(line)
            names = row["image"] if isinstance(row["image"], list) else [row["image"]]
            paths = [storage.join(self.data_paths.image_dir(line_id), name) for name in names]
        except Exception:  # not a row with images: the family finds out and skips it itself
            return line, media
        root = self.data_paths.image_dir(line_id)
        for path in paths:
            try:
                media[path] = read_media(path, [root], self.allow_outside_root)
            except Exception as exc:
                media[path] = exc
        return line, media

    def _read_line(self, line_id: int) -> bytes:
        with self.reads.io_lock():  # the index's file handles are shared with the read-ahead's threads
            return self.data_paths.read_line(line_id)

    def _row_line(self, line_id: int) -> bytes:
        here = self.reads.thread_state()
        line, here.row_media = self.reads.take(line_id, lambda: (self._read_line(line_id), {}))
        return line

    def _media_bytes(self, path: str, root: str) -> bytes:
        fetched = getattr(self.reads.thread_state(), "row_media", {}).get(path)
        if fetched is None:
            return read_media(path, [root], self.allow_outside_root)
        if isinstance(fetched, BaseException):
            raise fetched
        return fetched

    def _build_or_skip(self, line_id: int, rng, log, location: str) -> SampleBuilder | None:
        try:
            return self.build_sample(line_id, rng)
        except RowDropped as skipped:
            log.skip(skipped.reason, location, skipped.detail)
            return None

    def build_sample(self, line_id: int, rng: np.random.Generator) -> SampleBuilder:
        """The sample of one JSONL line; raises `RowDropped` with the reason it cannot be used."""
        try:
            row = json.loads(self._row_line(line_id))
        except ValueError as exc:
            raise RowDropped(SkipReason.JSON_INVALID, str(exc)) from None
        except RecursionError:
            raise RowDropped(SkipReason.JSON_INVALID, "nested too deeply to parse") from None
        problem = check_conversations(row)
        if problem:
            raise RowDropped(SkipReason.SCHEMA, problem)
        hint = role_hint(row["conversations"])
        images = self._load_images(row, self.data_paths.image_dir(line_id), rng)
        tags = count_image_tags(row["conversations"])
        if tags != len(images) and not self.policy.takes_rows_as_they_are:
            raise RowDropped(
                SkipReason.PLACEHOLDER_MISMATCH, f"{tags} <image> placeholder(s) for {len(images)} image(s){hint}"
            )
        builder = SampleBuilder()
        tensors = [self.transform.prepare(image, img_num=len(images)) for image in images]
        next_tensor = iter(tensors)
        elements = conversation_to_elements(row["conversations"], len(tensors))
        if self.policy.takes_rows_as_they_are:
            check_image_items(elements, len(tensors))
        for element in elements:
            if element["type"] == "image":
                builder.add_image("vit_image", next(next_tensor), self.transform.stride, enable_cfg=False, loss=False)
                continue
            ids = self.tokenizer.encode(element["text"])
            if ids:
                builder.add_text(ids, enable_cfg=False, loss=bool(element["has_loss"]))
        if not builder.has_loss():
            raise RowDropped(SkipReason.NO_LOSS, f"no answer turn with text{hint}")
        if (
            self.policy.takes_rows_as_they_are
        ):  # the reference keeps surplus images, unused, in the sample and its count
            for tensor in next_tensor:
                builder.image_tensor_list.append(tensor)
                builder.num_tokens += image_tokens(tensor.shape[1], tensor.shape[2], self.transform.stride)
        return builder

    def _load_images(self, row: dict, image_dir: str, rng: np.random.Generator) -> list:
        if row.get("image") is not None:
            names = row["image"] if isinstance(row["image"], list) else [row["image"]]
            return [self._load_image(storage.join(image_dir, name), image_dir) for name in names]
        if row.get("video") is not None:
            path = storage.join(image_dir, row["video"])
            try:
                check_video_path(path, [image_dir], self.allow_outside_root)
            except OutsideRootError as exc:
                raise RowDropped(SkipReason.OUTSIDE_ROOT, str(exc)) from None
            except NotRegularFileError as exc:
                raise RowDropped(SkipReason.VIDEO_DECODE, str(exc)) from None
            if self.frame_sampler is None:
                raise RowDropped(SkipReason.VIDEO_DECODE, "video row, but the group has no frame_sampler_args")
            try:
                if self.policy.reads_video_as_reference:
                    frames = read_reference_frames(self.frame_sampler, path, rng)
                else:
                    frames = self.frame_sampler(path, rng=rng)
            except VideoDecodeError as exc:
                raise RowDropped(skip_reason(exc) or SkipReason.VIDEO_DECODE, str(exc)) from None
            if self.policy.takes_rows_as_they_are:
                if not expand_video_tag_first_turn(row["conversations"], len(frames)):
                    raise RowDropped(SkipReason.VIDEO_TAG_MISSING, 'compat="bagel": <video> must be in the first turn')
            elif not expand_video_tag(row["conversations"], len(frames)):
                raise RowDropped(SkipReason.VIDEO_TAG_MISSING, "a video row needs <video> in a human turn")
            return frames
        return []

    def _load_image(self, path: str, root: str = ""):
        """One image of a row, read only under its image folder (symlinks resolved first)."""
        try:
            return self.media.decode(self._media_bytes(path, root))
        except (OSError, ValueError, TypeError) as exc:  # a folder, no permission, a loop, NUL, too long
            raise RowDropped(skip_reason(exc) or SkipReason.IMAGE_UNREADABLE, _image_detail(exc, path)) from None


def _image_detail(exc: Exception, path: str) -> str:
    """What a skipped image's log line says: the path, and what went wrong with it."""
    if isinstance(exc, OutsideRootError):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"{path} does not exist"
    if isinstance(exc, DECODE_ERRORS):
        return f"{path}: {exc}"
    return f"{path!r}: {type(exc).__name__}: {exc}"


def role_hint(conversations: list[dict]) -> str:
    """A hint when the turns use roles this format ignores (e.g. user/assistant)."""
    others = sorted({turn["from"] for turn in conversations} - {"human", "gpt", "system"})
    if not others:
        return ""
    return f" (roles {others} are ignored: this format reads only 'human' and 'gpt' turns; rename them)"
