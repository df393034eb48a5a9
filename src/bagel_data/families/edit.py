"""Image editing: parquet rows of image chains with per-step instructions.

Units are (parquet file, row group) pairs listed through `parquet_info`. A sample walks a
random stretch of one or two steps of the chain (docs/samples.md, Edit). Each image of the
row is decoded once and transformed once per transform, however many plan items use it.
Position of a sample: `[unit index in this worker's list, row within the group]`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

from ..errors import BagelDataError, ConfigError, RowDropped, SkipReason, counted
from ..formats import EDIT_COLUMNS
from ..media.images import ImageTransform
from ..sample import SampleBuilder
from ..schema.kinds import Field
from ..sources import storage
from ..sources.parquet import counted_slices, python_rows
from .base import DistributedIterableDataset
from .group_args import FILE_ORDER, PARQUET_INFO_PATH, VIT_TRANSFORM
from .media import DECODE_ERRORS, FamilyMedia
from .parquet_info import check_row_groups, parquet_info_entry, stale_row_groups
from .samples import guarded
from .unit_kinds import ParquetRowGroups
from .worst_case import edit_worst_length, measured

COLUMNS = EDIT_COLUMNS


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
            f"{counted(len(images), 'image')} need {counted(len(images) - 1, 'instruction list')}, "
            f"got {len(instructions)}",
        )
    return None


def choose_steps(rng, num_images: int) -> tuple[int, int, bool]:
    """(start, end, merged): the stretch of the chain a sample covers.

    `merged` means the instructions of several steps become one text before the end image.
    """
    start, end = choose_span(rng, num_images)
    return (start, *choose_merge(rng, start, end, num_images))


def choose_span(rng, num_images: int) -> tuple[int, int]:
    """(start, end): the first image and the last one a sample reaches."""
    start = int(rng.integers(0, num_images - 1))
    return start, int(rng.integers(start + 1, min(start + 2, num_images - 1) + 1))


def choose_merge(rng, start: int, end: int, num_images: int) -> tuple[int, bool]:
    """(end, merged): a coin (only when the stretch has two steps) merges the steps' texts."""
    if end - start > 1 and rng.random() < 0.5:
        return (end - 1 if end == num_images - 1 else end), True
    return end, False


def _columns(names) -> tuple[str, ...] | None:
    """The columns an edit unit reads; None (a counted schema skip) when the file lacks one."""
    return COLUMNS if all(name in names for name in COLUMNS) else None


class UnifiedEditIterableDataset(DistributedIterableDataset):
    """Image-editing dataset: (input, instruction, output) chains over parquet row groups."""

    GROUP_FIELDS: ClassVar[dict[str, Field]] = {
        "vit_image_transform_args": dataclasses.replace(VIT_TRANSFORM, required=True),
        "file_order": FILE_ORDER,
    }
    DATASET_INFO_FIELDS: ClassVar[dict[str, Field]] = {
        "parquet_info_path": dataclasses.replace(PARQUET_INFO_PATH, required=True)
    }

    @classmethod
    def group_kwargs(cls, group):
        vit_transform = group.transform("vit_image_transform_args")
        parquet_info: dict = {}
        for dataset in group.dataset_names:
            parquet_info.update(group.parquet_info(dataset) or {})
        return {"vit_transform": vit_transform, "parquet_info": parquet_info}

    parallel_rebuild = True  # a row is built from locals only (see the base class)

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
        file_order: str | None = None,
        **options,
    ):
        # `options`: the base class's keyword-only settings (compat, strict, max_consecutive_failures).
        super().__init__(dataset_name, local_rank, world_size, num_workers, **options)
        self.transform = transform
        self.vit_transform = vit_transform
        self.media = FamilyMedia((transform, vit_transform), self.policy, self.image_formats)
        self.tokenizer = tokenizer
        self.data_status = data_status
        self.file_order = self.policy.file_order(file_order)
        self.data_paths = self.get_data_paths(data_dir_list, num_used_data, parquet_info)
        self.set_epoch()

    def get_data_paths(self, data_dir_list, num_used_data, parquet_info):
        # Each distinct file's declared row groups: num_used_data repeats files, and each is
        # looked up and checked once. A local file's footer is checked here (cheap, and the
        # mistake is named before the run); a remote one's when a worker opens it (`_rows`),
        # since reading every footer here costs two requests per file on every rank.
        self.declared_row_groups: dict[str, int] = {}
        self.footer_unchecked: set[str] = set()
        declared = functools.partial(self._declared_row_groups, parquet_info)
        self.units.kind = kind = ParquetRowGroups()
        units, self.listed_files = kind.list_units(data_dir_list, num_used_data, self.file_order, declared)
        return units

    def _declared_row_groups(self, parquet_info: dict, path: str, data_dir: str) -> int | None:
        """A file's row groups as `parquet_info` declares them; None: left out (compat)."""
        info = parquet_info_entry(parquet_info, path, data_dir)
        if info is None and self.policy.reference:  # the reference leaves such a file out, silently
            self.skip_log.skip(SkipReason.PARQUET_INFO_MISSING, path, "no parquet_info entry; not read")
            return None
        if info is None:
            raise ConfigError(
                "parquet_info",
                path,
                "this parquet file has no entry; add it (keyed by its path or its name "
                "relative to data_dir) with its num_row_groups, e.g. with "
                "bagel_data.tools.prepare.write_parquet_info",
            )
        declared = self.declared_row_groups[path] = int(info["num_row_groups"])
        if storage.is_uri(path):
            self.footer_unchecked.add(path)
        else:
            check_row_groups(path, declared)
        return declared

    def read_source(self):
        return self.units.kind.read_source(self.units.unit, _columns)

    def _unit_samples(self, unit_id, pass_index, start, log, single=False):
        unit = self.units.unit(unit_id)
        row_start = start[0] if start else 0
        stop_row = row_start + 1 if single else None
        for row, images, instructions in self._rows(unit, row_start, log, stop_row):
            location = self.units.kind.location(unit, (row,))
            draw = self.units.row_random(unit_id, pass_index, row)
            builder = guarded(log, location, self.build_sample, images, instructions, draw.rng, location, log)
            if builder is not None:
                yield (row,), builder, draw.state

    def worst_case_rows(self, shard, index, unit_id, log):
        """Each row at its longest stretch and phrasing, every image of its chain decoded."""
        unit = self.units.unit(unit_id)
        for row, images, instructions in self._rows(unit, 0, log):
            location = self.units.kind.location(unit, (row,))
            problem = check_edit_row(images, instructions)
            if problem is not None:
                log.skip(problem[0], location, problem[1])
                continue
            yield from measured([(location, lambda i=images, t=instructions: edit_worst_length(self, i, t))], log)

    def _rows(self, unit, row_start: int, log, stop_row: int | None = None):
        path, row_group, *_ = span = ParquetRowGroups.span(unit)
        try:
            with self.reads.open_parquet(path) as reader:
                # Only files not checked at construction: a local file rewritten since is a
                # counted skip of the rows it lost, as before.
                if path in getattr(self, "footer_unchecked", ()):
                    declared = self.declared_row_groups[path]
                    if declared != reader.num_row_groups:
                        raise stale_row_groups(path, declared, reader.num_row_groups)
                missing = [name for name in COLUMNS if name not in reader.schema.names]
                if missing:
                    detail = f"missing column(s) {missing}; edit needs {list(COLUMNS)}"
                    rows = reader.row_group_rows(row_group) if row_group < reader.num_row_groups else 1
                    log.skip(SkipReason.SCHEMA, f"{path}, row group {row_group}", detail, rows=rows)
                    return
                table = reader.read_row_group(row_group, COLUMNS)
        except BagelDataError:
            raise
        except Exception as exc:  # any pyarrow or I/O failure makes the unit unreadable
            log.skip(SkipReason.UNIT_UNREADABLE, f"{path}, row group {row_group}", f"{type(exc).__name__}: {exc}")
            return
        rows = span.rows(table.num_rows, row_start)
        stop = rows.stop if stop_row is None else min(rows.stop, stop_row)
        for row, cells in python_rows(table, rows.start, stop, counted_slices(log, f"{path}, row group {row_group}")):
            yield row, cells["image_list"], cells["instruction_list"]

    def build_sample(self, images, instructions, rng, location: str, log) -> SampleBuilder | None:
        if self.policy.reference:
            return self._build_compat(images, instructions, rng, location, log)
        problem = check_edit_row(images, instructions)
        if problem is not None:
            log.skip(problem[0], location, problem[1])
            return None
        start, end, merged = choose_steps(rng, len(images))
        image = self._decoded(images)
        try:
            return self._plan(image, instructions, start, end, merged, rng)
        except DECODE_ERRORS as exc:
            self.media.skip(log, location, exc)
        return None

    def _decoded(self, images: list[bytes]):
        """`image(index)`: image `index` of the row, decoded once for both transforms (an
        exact decode for either keeps the shared one exact)."""
        decoded: dict[int, object] = {}

        def image(index: int):
            if index not in decoded:
                decoded[index] = self.media.decode(images[index])
            return decoded[index]

        return image

    def _build_compat(self, images, instructions, rng, location: str, log) -> SampleBuilder | None:
        """The reference's order (`compat="bagel"`): span draws, the start image, the coin,
        then one phrasing per step; a row it gives up on midway keeps the draws it made."""
        problem = None
        if not isinstance(images, list) or not all(isinstance(item, bytes) for item in images):
            problem = (SkipReason.SCHEMA, "image_list must be a list of encoded images")
        elif not isinstance(instructions, list):
            problem = (SkipReason.SCHEMA, "instruction_list must be a list of lists of strings")
        elif len(images) < 2:
            problem = (SkipReason.EDIT_TOO_FEW_IMAGES, f"{len(images)} image(s); a chain needs at least 2")
        if problem is not None:
            log.skip(problem[0], location, problem[1])
            return None
        image = self._decoded(images)
        try:
            start, end = choose_span(rng, len(images))
            image(start)  # the reference decodes it before the coin
            end, merged = choose_merge(rng, start, end, len(images))
            return self._plan(image, instructions, start, end, merged, rng)
        except DECODE_ERRORS as exc:
            self.media.skip(log, location, exc)
        except RowDropped as exc:  # compat: a row the reference gives up on partway
            log.skip(exc.reason, location, exc.detail)
        return None

    def _plan(self, image, instructions, start, end, merged, rng) -> SampleBuilder:
        vae, vit = self.transform, self.vit_transform
        builder = SampleBuilder()

        def encode(text: str) -> list[int]:
            return self.tokenizer.encode(text)

        def phrasing(step: int) -> str:
            if self.policy.reference:
                return self._compat_phrasing(instructions, step, rng)
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

    @staticmethod
    def _compat_phrasing(instructions, step: int, rng) -> str:
        if step - 1 >= len(instructions):
            raise RowDropped(SkipReason.EDIT_LISTS_DISAGREE, f"no instruction list for step {step}")
        options = instructions[step - 1]
        if not isinstance(options, list) or not options or not all(isinstance(text, str) for text in options):
            raise RowDropped(SkipReason.SCHEMA, f"instruction_list[{step - 1}] must be a non-empty list of strings")
        return options[int(rng.integers(len(options)))]
