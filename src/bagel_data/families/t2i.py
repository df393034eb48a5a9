"""Text-to-image pretraining: parquet shards of (image bytes, JSON captions), or WebDataset
tars read in place (`families/t2i_tars.py`).

Units are parquet files (or tars: a sample's row is then `(block, sample within it)`); a sample is one caption (text, classifier-free-guidance dropout
allowed) followed by the image as a VAE generation target. Position of a sample:
`[file index in this worker's list, row group, row within the group]`; its row within the
unit is `(row group, row)`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import ClassVar

from ..errors import ConfigError, RowDropped, SkipReason
from ..formats import T2I_COLUMNS
from ..media.images import ImageTransform
from ..media.safe_read import OutsideRootError, read_media
from ..sample import SampleBuilder
from ..schema.kinds import Field, ListOf, OneOf, Str
from ..sources import storage
from ..sources.hub_tables import is_save_to_disk, save_to_disk_fix
from ..sources.parquet import counted_slices, python_rows
from ..sources.table_cells import (
    CellError,
    caption_cell,
    caption_cells,
    check_bagel_columns,
    image_cell,
    local_table_columns,
)
from ..sources.tar_members import load_class_names
from .base import DistributedIterableDataset
from .group_args import FILE_ORDER
from .media import DECODE_ERRORS, FamilyMedia
from .parquet_listing import ParquetListing
from .samples import guarded
from .t2i_tars import check_no_columns, kept_index, remote_tar_counts, t2i_shard_files, tar_rows
from .unit_kinds import ParquetFiles, TarBlocks
from .worst_case import measured, t2i_worst_length

COLUMNS = T2I_COLUMNS


def parse_captions(raw: object) -> list[str] | None:
    """The caption texts of a row, or None when the cell is not a JSON object of strings."""
    if not isinstance(raw, (str, bytes)):
        return None
    try:
        captions = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: a nesting-depth bomb
        return None
    if not isinstance(captions, dict) or not all(isinstance(text, str) for text in captions.values()):
        return None
    return list(captions.values())


class T2IIterableDataset(DistributedIterableDataset):
    """Iterable over a parquet-sharded (image, captions) text-to-image dataset."""

    # `image_column` / `caption_column` read a user's table (Hugging Face parquet) in place:
    # `_table_cells`. A table's image cells that hold a path name a file under the dataset's
    # `image_root` (default: its data_dir), as `prepare t2i --image-root` reads them.
    GROUP_FIELDS: ClassVar[dict[str, Field]] = {
        "file_order": FILE_ORDER,
        "image_column": Field(
            Str(), "a table's image column, read in place: binary or a datasets.Image struct (docs/formats/t2i.md)",
            None,
        ),
        "caption_column": Field(
            OneOf((Str(), ListOf(Str(), nonempty=True))),
            "a table's caption column, read in place: a text, a list of texts or BAGEL's JSON captions; a list of "
            "columns gives each sample the captions of all of them to draw from", None,
        ),
        "class_names": Field(
            OneOf((ListOf(Str(), nonempty=True), Str(path=True))),
            "WebDataset tars of image + `.cls` (class-label sets): the caption of label i, as a list, or a text file "
            "of one name per line", None,
        ),
    }  # fmt: skip
    DATASET_INFO_FIELDS: ClassVar[dict[str, Field]] = {
        "image_root": Field(
            Str(path=True), "the folder a table's image cells that hold a path are relative to (default: data_dir)"
        )
    }
    parallel_rebuild = True  # a row is built from locals only (see the base class)

    def __init__(
        self,
        dataset_name,
        transform: ImageTransform,
        tokenizer,
        data_dir_list,
        num_used_data,
        local_rank=0,
        world_size=1,
        num_workers=8,
        data_status=None,
        *,
        file_order: str | None = None,
        image_column: str | None = None,
        caption_column: str | Sequence[str] | None = None,
        image_roots: Sequence[str | None] | None = None,
        class_names: Sequence[str] | str | None = None,
        **options,
    ):
        # `options`: the base class's keyword-only settings (compat, strict, max_consecutive_failures).
        super().__init__(dataset_name, local_rank, world_size, num_workers, **options)
        self.transform = transform
        self.media = FamilyMedia((transform,), self.policy, self.image_formats)
        self.tokenizer = tokenizer
        self.data_status = data_status
        self.file_order = self.policy.file_order(file_order)
        self.data_paths = self.get_data_paths(data_dir_list, num_used_data)
        # BAGEL's own columns unless the group names a table's (checked now where the
        # first file's footer is local; a remote one when a worker opens it).
        self.table = None
        # A tar sample labelled by a `.cls` takes its class's name as caption (t2i_tars.py).
        self.class_names = load_class_names(class_names, f"{dataset_name}.class_names")
        if self.tars:
            check_no_columns(image_column, caption_column)
        elif image_column is not None or caption_column is not None:
            self.table = local_table_columns(self.data_paths, image_column, caption_column)
        else:
            check_bagel_columns(self.data_paths, COLUMNS)
        self.columns = COLUMNS if self.table is None else self.table
        roots = [root or folder for folder, root in zip(data_dir_list, image_roots or [None] * len(data_dir_list))]
        self.unit_roots = {  # each table file's image root, by the folder it was listed in (or below)
            path: root for folder, root in sorted(zip(data_dir_list, roots), key=lambda pair: len(pair[0]))
            for path in self.data_paths if path.startswith(storage.join(folder, ""))
        }  # fmt: skip
        self.set_epoch()

    @classmethod
    def group_kwargs(cls, group):
        roots = [group.path(name, "image_root", "dir", required=False) for name in group.dataset_names]
        return {"image_roots": roots, **group.given("image_column", "caption_column", "class_names")}

    def get_data_paths(self, data_dir_list, num_used_data):
        """The shard files; the unit kind is tars (`self.tars`) or parquet files."""
        for folder in data_dir_list:
            if is_save_to_disk(folder):
                raise ConfigError("data_dir", folder, save_to_disk_fix(folder))
        entries: dict = {}  # each folder's listing: a tar folder's counts file is found there
        self.tars, paths, self.listed_files = t2i_shard_files(data_dir_list, num_used_data, self.file_order, entries)
        self.tar_counts: dict[str, int] = {}
        if self.tars:
            self.tar_counts = remote_tar_counts(paths, self.listed_files, self.policy.reference, entries)
            self.units.kind = TarBlocks(self._tar_index, self.listed_files, self.tar_counts)
        else:  # the reference reads no tars: only a parquet listing can differ from its
            listing = ParquetListing.of(data_dir_list, num_used_data, self.file_order, paths, self.listed_files)
            self.units.kind = ParquetFiles(listing, self.listed_files)
        return paths

    def _tar_index(self, path: str):
        """Tar `path`'s index, kept by this process; known current by its listing (no request)."""
        return kept_index(self.reads, path, self.listed_files.get(path), self.tar_counts.get(path))

    def media_folders(self):
        """A table's image roots: its path cells are read from there (bytes cells need none)."""
        return sorted(set(self.unit_roots.values())) if self.table is not None else ()

    def read_source(self):
        return self.units.kind.read_source(self.units.unit, self.parquet_columns)

    def parquet_columns(self, names):
        return self.columns if all(name in names for name in self.columns) else None

    def _located_rows(self, path: str, start, log, single: bool = False):
        """(row group or block, row, cells, location) of a unit's rows from `start` on."""
        group_start, row_start = start or (0, 0)
        if self.tars:
            listed = self.listed_files.get(path)
            counted = self.tar_counts.get(path)
            yield from tar_rows(
                self.reads, path, group_start, row_start, log, single, self.class_names, listed, counted
            )
            return
        for row_group, row, cells in self._rows(path, group_start, row_start, log, single):
            location = f"{path}, row group {row_group}, row {row}"
            if self.table is None or self._read_named_image(cells, self.unit_roots.get(path), location, log):
                yield row_group, row, cells, location

    def _read_named_image(self, cells: dict, root: str | None, location: str, log) -> bool:
        """A table cell that names an image file gets the file's bytes (read under `root`, as
        `prepare t2i` reads it); False, the skip counted, when it cannot be read."""
        try:
            image = image_cell(cells["image"])
        except CellError:
            return True  # `_table_cells` names what is wrong with the cell
        if isinstance(image, bytes) or root is None:
            return True
        # A URI or an absolute path names itself (and lies outside the root unless allowed).
        path = image if storage.is_uri(image) or os.path.isabs(image) else storage.join(root, image)
        try:
            cells["image"] = read_media(path, [root], self.allow_outside_root)
        except OutsideRootError as exc:
            log.skip(SkipReason.OUTSIDE_ROOT, location, str(exc))
        except FileNotFoundError:
            log.skip(SkipReason.IMAGE_MISSING, location, f"{path[:200]} does not exist (image_root {root[:200]})")
        except (OSError, ValueError) as exc:  # not a file, too large, a NUL, a scheme nothing opens
            log.skip(SkipReason.IMAGE_UNREADABLE, location, f"{path[:200]}: {exc}")
        else:
            return True
        return False

    def _unit_samples(self, unit_id, pass_index, start, log, single=False):
        path = self.units.unit(unit_id)
        for row_group, row, cells, location in self._located_rows(path, start, log, single):
            draw = self.units.row_random(unit_id, pass_index, row_group, row)
            builder = guarded(log, location, self.build_sample, cells, draw.rng, location, log)
            if builder is not None:
                yield (row_group, row), builder, draw.state

    def worst_case_rows(self, shard, index, unit_id, log):
        """Each row at its longest caption (the run draws one of them)."""
        path = self.units.unit(unit_id)
        rows = (
            (location, lambda c=cells: self._worst_length(c))
            for _, _, cells, location in self._located_rows(path, None, log)
        )
        return measured(rows, log)

    def _worst_length(self, cells: dict) -> int:
        problem = self._table_cells(cells)
        if problem is not None:
            raise RowDropped(*problem)
        captions = parse_captions(cells["captions"])
        if captions is None:
            raise RowDropped(SkipReason.CAPTION_INVALID, f"captions cell {str(cells['captions'])[:80]!r}")
        return t2i_worst_length(self, captions, cells["image"])

    def _table_cells(self, cells: dict) -> tuple[SkipReason, str] | None:
        """A table row's cells, in place, as BAGEL's: embedded image bytes (binary or a
        `datasets.Image` struct) and captions as a JSON object; the reason when they cannot be."""
        if self.table is None:
            return None
        try:
            image = image_cell(cells["image"])
            several = len(self.columns) > 2  # the row's cells of several caption columns
            captions = caption_cells(cells["captions"]) if several else caption_cell(cells["captions"])
        except CellError as exc:
            return SkipReason.SCHEMA, str(exc)
        if not isinstance(image, bytes):  # a path: `prepare t2i` reads those
            return SkipReason.SCHEMA, f"image cell names a file ({image[:80]!r}); read in place needs its bytes"
        cells["image"] = image
        cells["captions"] = json.dumps({f"caption_{i}": text for i, text in enumerate(captions, 1)})
        return None

    def _rows(self, path: str, group_start: int, row_start: int, log, single: bool = False):
        """(row group, row, {column: cell}) for every row from the start point on (the
        first one only when `single`)."""
        try:
            reader = self.reads.open_parquet(path)
        except Exception as exc:  # any pyarrow or I/O failure makes the whole unit unreadable
            log.skip(SkipReason.UNIT_UNREADABLE, path, str(exc))
            return
        with reader:
            missing = [name for name in self.columns if name not in reader.schema.names]
            if missing:
                detail = f"missing column(s) {missing}; T2I needs {list(self.columns)}"
                if self.table is None:
                    detail += "; a table with other column names is read with image_column / caption_column"
                log.skip(SkipReason.SCHEMA, path, detail, rows=reader.num_rows)
                return
            for row_group in range(group_start, reader.num_row_groups):
                try:  # a corrupt page loses its row group, not the run
                    table = reader.read_row_group(row_group, list(self.columns))
                except Exception as exc:
                    rows = reader.row_group_rows(row_group)
                    location = f"{path}, row group {row_group} ({rows} rows)"
                    log.skip(SkipReason.ROW_GROUP_UNREADABLE, location, f"{type(exc).__name__}: {exc}", rows=rows)
                    if single:
                        return
                    continue
                first = row_start if row_group == group_start else 0
                image, texts = self.columns[0], self.columns[1:]
                lost = counted_slices(log, f"{path}, row group {row_group}")
                for row, cells in python_rows(table, first, first + 1 if single else None, lost):
                    # Several caption columns: a row's cells of all of them, in order (`_table_cells`).
                    captions = cells[texts[0]] if len(texts) == 1 else [cells[name] for name in texts]
                    yield row_group, row, {"image": cells[image], "captions": captions}
                    if single:
                        return
                if single and first < table.num_rows:  # its one row was lost with its slice
                    return

    def build_sample(self, cells: dict, rng, location: str, log) -> SampleBuilder | None:
        problem = self._table_cells(cells)
        if problem is not None:
            reason, detail = problem
            log.skip(reason, location, detail)
            return None
        captions = parse_captions(cells["captions"])
        if captions is None:
            log.skip(SkipReason.CAPTION_INVALID, location, f"captions cell {str(cells['captions'])[:80]!r}")
            return None
        if not isinstance(cells["image"], bytes):
            log.skip(SkipReason.SCHEMA, location, "image cell is not binary")
            return None
        try:
            image = self.media.decode(cells["image"])
        except DECODE_ERRORS as exc:
            self.media.skip(log, location, exc)
            return None
        # An empty caption object trains the image unconditionally, as the reference does.
        caption = captions[int(rng.integers(len(captions)))] if captions else " "
        builder = SampleBuilder()
        builder.add_text(self.tokenizer.encode(caption), enable_cfg=True, loss=False)
        builder.add_image(
            "vae_image", self.transform.prepare(image), self.transform.stride, enable_cfg=False, loss=True
        )
        return builder
