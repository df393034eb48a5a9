"""VLM supervised fine-tuning: JSONL conversations with images or video frames.

Units are JSONL lines. A sample is the conversation's turns as text items (answers carry
the loss) with ViT image items where `<image>` stands. Rows whose placeholders do not match
their images, or that have no answer, are skipped with a named reason instead of producing
an inconsistent plan. Position of a sample: the row's index in this worker's list.
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import SkipReason
from ..media.images import ImageDecodeError, ImageTooLargeError, ImageTransform, decode_image, fast_draft_size
from ..media.video import VideoDecodeError
from ..sample import SampleBuilder
from ..sources import storage
from ..sources.jsonl import JsonlIndex
from .base import DistributedIterableDataset
from .conversation import check_conversations, conversation_to_elements, count_image_tags, expand_video_tag


class _RowSkipped(Exception):
    def __init__(self, reason: SkipReason, detail: str):
        self.reason, self.detail = reason, detail


class SftJSONLIterableDataset(DistributedIterableDataset):
    """Iterable over conversation JSONL rows where each row may reference images."""

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
    ):
        super().__init__(dataset_name, local_rank, world_size, num_workers)
        self.transform = transform
        self.tokenizer = tokenizer
        self.frame_sampler = frame_sampler
        self.data_status = data_status
        self.data_paths = self.get_data_paths(
            jsonl_path_list, data_dir_list, num_used_data, shuffle_lines, shuffle_seed
        )
        self.set_epoch()

    def get_data_paths(self, jsonl_path_list, data_dir_list, num_used_data, shuffle_lines, shuffle_seed):
        return JsonlIndex(jsonl_path_list, data_dir_list, num_used_data, shuffle_lines, shuffle_seed)

    def sorted_units(self):
        # The index already holds the lines in canonical order: a unit is a line index.
        return np.arange(len(self.data_paths), dtype=np.int64)

    def unit_view(self, unit):
        return self.data_paths[int(unit)]

    def change_format(self, data, num_images):
        return conversation_to_elements(data["conversations"], num_images)

    def data_index(self, position):
        return position[0]  # the reference's position is the row's index in the worker's list

    def _unit_samples(self, unit_id, pass_index, start, log, single=False):
        line_id = int(self.epoch_units[unit_id])
        try:
            builder = self.build_sample(line_id, self.sample_rng(unit_id, pass_index))
        except _RowSkipped as skipped:
            log.skip(skipped.reason, self.data_paths.location(line_id), skipped.detail)
            return
        yield (), builder

    def build_sample(self, line_id: int, rng: np.random.Generator) -> SampleBuilder:
        """The sample of one JSONL line; raises `_RowSkipped` with the reason it cannot be used."""
        try:
            row = json.loads(self.data_paths.read_line(line_id))
        except ValueError as exc:
            raise _RowSkipped(SkipReason.JSON_INVALID, str(exc)) from None
        problem = check_conversations(row)
        if problem:
            raise _RowSkipped(SkipReason.SCHEMA, problem)
        images = self._load_images(row, self.data_paths.image_dir(line_id), rng)
        tags = count_image_tags(row["conversations"])
        if tags != len(images):
            raise _RowSkipped(
                SkipReason.PLACEHOLDER_MISMATCH, f"{tags} <image> placeholder(s) for {len(images)} image(s)"
            )
        builder = SampleBuilder()
        tensors = [self.transform.prepare(image, img_num=len(images)) for image in images]
        next_tensor = iter(tensors)
        for element in conversation_to_elements(row["conversations"], len(tensors)):
            if element["type"] == "image":
                builder.add_image("vit_image", next(next_tensor), self.transform.stride, enable_cfg=False, loss=False)
                continue
            ids = self.tokenizer.encode(element["text"])
            if ids:
                builder.add_text(ids, enable_cfg=False, loss=bool(element["has_loss"]))
        if not builder.has_loss():
            raise _RowSkipped(SkipReason.NO_LOSS, "no answer turn with text")
        return builder

    def _load_images(self, row: dict, image_dir: str, rng: np.random.Generator) -> list:
        if row.get("image") is not None:
            names = row["image"] if isinstance(row["image"], list) else [row["image"]]
            draft = fast_draft_size(self.transform)
            return [self._load_image(storage.join(image_dir, name), draft) for name in names]
        if row.get("video") is not None:
            path = storage.join(image_dir, row["video"])
            if self.frame_sampler is None:
                raise _RowSkipped(SkipReason.VIDEO_DECODE, "video row, but the group has no frame_sampler_args")
            try:
                frames = self.frame_sampler(path, rng=rng)
            except VideoDecodeError as exc:
                raise _RowSkipped(SkipReason.VIDEO_DECODE, str(exc)) from None
            if not expand_video_tag(row["conversations"], len(frames)):
                raise _RowSkipped(SkipReason.VIDEO_TAG_MISSING, "a video row needs <video> in a human turn")
            return frames
        return []

    @staticmethod
    def _load_image(path: str, draft_size=None):
        try:
            with storage.open_input(path) as handle:
                return decode_image(handle, draft_size=draft_size)
        except FileNotFoundError:
            raise _RowSkipped(SkipReason.IMAGE_MISSING, f"{path} does not exist") from None
        except ImageTooLargeError as exc:
            raise _RowSkipped(SkipReason.IMAGE_TOO_LARGE, f"{path}: {exc}") from None
        except ImageDecodeError as exc:
            raise _RowSkipped(SkipReason.IMAGE_DECODE, f"{path}: {exc}") from None
