"""Image editing: parquet rows of image chains with per-step instructions.

Units are (parquet file, row group) pairs listed through `parquet_info`. A sample walks a
random stretch of one or two steps of the chain (SPEC section 4, Edit). Each image of the
row is decoded once and transformed once per transform, however many plan items use it.
Position of a sample: `[unit index in this worker's list, row within the group]`.
"""

from __future__ import annotations

import os

from ..errors import ConfigError, SkipReason
from ..media.images import ImageDecodeError, ImageTooLargeError, ImageTransform, decode_image, fast_draft_size
from ..sample import SampleBuilder
from ..sources.parquet import ParquetReader, get_parquet_data_paths
from .base import DistributedIterableDataset

COLUMNS = ("image_list", "instruction_list")


def check_edit_row(images: object, instructions: object) -> tuple[SkipReason, str] | None:
    """Why an edit row cannot make a consistent sample, or None."""
    if not isinstance(images, list) or not all(isinstance(item, bytes) for item in images):
        return SkipReason.SCHEMA, "image_list must be a list of encoded images"
    if len(images) < 2:
        return SkipReason.EDIT_TOO_FEW_IMAGES, f"{len(images)} image(s); a chain needs at least 2"
    if not isinstance(instructions, list) or not all(
        isinstance(step, list) and step and all(isinstance(text, str) for text in step) for step in instructions
    ):
        return SkipReason.SCHEMA, "instruction_list must be a list of non-empty lists of strings"
    if len(instructions) != len(images) - 1:
        return (
            SkipReason.EDIT_LISTS_DISAGREE,
            f"{len(images)} images need {len(images) - 1} instruction lists, got {len(instructions)}",
        )
    return None


def choose_steps(rng, num_images: int) -> tuple[int, int, bool]:
    """(start, end, merged): the stretch of the chain a sample covers.

    `merged` means the instructions of several steps become one text before the end image.
    """
    start = int(rng.integers(0, num_images - 1))
    end = int(rng.integers(start + 1, min(start + 2, num_images - 1) + 1))
    merged = False
    if end - start > 1 and rng.random() < 0.5:
        merged = True
        if end == num_images - 1:
            end -= 1
    return start, end, merged


class UnifiedEditIterableDataset(DistributedIterableDataset):
    """Image-editing dataset: (input, instruction, output) chains over parquet row groups."""

    def __init__(
        self,
        dataset_name,
        transform: ImageTransform,
        tokenizer,
        vit_transform: ImageTransform,
        data_dir_list,
        num_used_data,
        parquet_info,
        local_rank=0,
        world_size=1,
        num_workers=8,
        data_status=None,
        *,
        file_order: str = "sorted",
    ):
        super().__init__(dataset_name, local_rank, world_size, num_workers)
        self.transform = transform
        self.vit_transform = vit_transform
        self.tokenizer = tokenizer
        self.data_status = data_status
        self.file_order = file_order
        self.data_paths = self.get_data_paths(data_dir_list, num_used_data, parquet_info)
        self.set_epoch()

    def get_data_paths(self, data_dir_list, num_used_data, parquet_info):
        units = []
        for data_dir, num_used in zip(data_dir_list, num_used_data):
            for path in get_parquet_data_paths([data_dir], [num_used], file_order=self.file_order):
                info = parquet_info.get(path) or parquet_info.get(os.path.relpath(path, data_dir))
                if info is None:
                    raise ConfigError(
                        "parquet_info",
                        path,
                        "this parquet file has no entry; add it (keyed by its path or its name "
                        "relative to data_dir) with its num_row_groups, e.g. with `bagel-data prepare edit`",
                    )
                units.extend((path, group) for group in range(int(info["num_row_groups"])))
        return units

    def _unit_samples(self, unit_id, pass_index, start, log, single=False):
        path, row_group = self.epoch_units[unit_id]
        row_start = start[0] if start else 0
        stop_row = row_start + 1 if single else None
        for row, images, instructions in self._rows(unit_id, row_start, log, stop_row):
            location = f"{path}, row group {row_group}, row {row}"
            builder = self.build_sample(images, instructions, self.sample_rng(unit_id, pass_index, row), location, log)
            if builder is not None:
                yield (row,), builder

    def _rows(self, unit_id: int, row_start: int, log, stop_row: int | None = None):
        path, row_group = self.epoch_units[unit_id]
        try:
            with ParquetReader(path) as reader:
                missing = [name for name in COLUMNS if name not in reader.schema.names]
                if missing:
                    log.skip(SkipReason.SCHEMA, path, f"missing column(s) {missing}; edit needs {list(COLUMNS)}")
                    return
                table = reader.read_row_group(row_group, COLUMNS)
        except Exception as exc:  # any pyarrow or I/O failure makes the unit unreadable
            log.skip(SkipReason.UNIT_UNREADABLE, f"{path}, row group {row_group}", str(exc))
            return
        images = table.column("image_list").to_pylist()
        instructions = table.column("instruction_list").to_pylist()
        for row in range(row_start, min(table.num_rows, stop_row or table.num_rows)):
            yield row, images[row], instructions[row]

    def build_sample(self, images, instructions, rng, location: str, log) -> SampleBuilder | None:
        problem = check_edit_row(images, instructions)
        if problem is not None:
            log.skip(problem[0], location, problem[1])
            return None
        start, end, merged = choose_steps(rng, len(images))
        decoded: dict[int, object] = {}
        # Both transforms use the shared decode: an exact one keeps it exact.
        draft = fast_draft_size(self.transform, self.vit_transform)

        def image(index: int):
            if index not in decoded:
                decoded[index] = decode_image(images[index], draft_size=draft)
            return decoded[index]

        try:
            return self._plan(image, instructions, start, end, merged, rng)
        except ImageTooLargeError as exc:
            log.skip(SkipReason.IMAGE_TOO_LARGE, location, str(exc))
        except ImageDecodeError as exc:
            log.skip(SkipReason.IMAGE_DECODE, location, str(exc))
        return None

    def _plan(self, image, instructions, start, end, merged, rng) -> SampleBuilder:
        vae, vit = self.transform, self.vit_transform
        builder = SampleBuilder()

        def encode(text: str) -> list[int]:
            return self.tokenizer.encode(text)

        def phrasing(step: int) -> str:
            options = instructions[step - 1]
            return options[int(rng.integers(len(options)))]

        start_vae = vae.prepare(image(start))
        builder.add_image("vae_image", start_vae, vae.stride, enable_cfg=True, loss=False)
        builder.add_image("vit_image", vit.prepare(image(start)), vit.stride, enable_cfg=True, loss=False)
        if merged:
            text = "".join(phrasing(step) + ". " for step in range(start + 1, end + 1))
            builder.add_text(encode(text.rstrip()), enable_cfg=True, loss=False)
            builder.add_image("vae_image", vae.prepare(image(end)), vae.stride, enable_cfg=False, loss=True)
            return builder
        for step in range(start + 1, end + 1):
            builder.add_text(encode(phrasing(step)), enable_cfg=True, loss=False)
            step_vae = vae.prepare(image(step))
            builder.add_image("vae_image", step_vae, vae.stride, enable_cfg=False, loss=True)
            if step != end:
                builder.add_image("vae_image", step_vae, vae.stride, enable_cfg=True, loss=False)
                builder.add_image("vit_image", vit.prepare(image(step)), vit.stride, enable_cfg=True, loss=False)
        return builder
