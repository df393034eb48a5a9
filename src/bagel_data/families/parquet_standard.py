"""`ParquetStandardIterableDataset`: parquet rows handed to a family's `parse_row`.

The half of BAGEL's extension contract that reads: units are (parquet file, row group)
pairs listed through `parquet_info`, sharded over ranks and workers, resumed exactly,
restarted elastically. Each row is a `Row`; an exception in `parse_row` is a counted
`parse_row_failed` skip naming file, row group and row (strict mode raises it), and its
result is checked against the sample schema. During `parse_row`, `self.rng` is a
`random.Random` and `self.np_rng` a numpy `Generator` seeded by the row's address. The
plan builders are the other half (`families/interleaved_base.py`).
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import ClassVar

from ..compat.streams import RandomSource
from ..errors import (
    BagelDataError,
    ConfigError,
    RowDropped,
    SkipLog,
    SkipReason,
)
from ..sample import SampleBuilder
from ..schema.kinds import Field
from ..sources import storage
from ..sources.parquet import ParquetReader, counted_slices, python_rows
from .base import DistributedIterableDataset
from .group_args import COMMON_GROUP_KEYS, FILE_ORDER, PARQUET_INFO_PATH, VIT_TRANSFORM
from .media import MEDIA_ERRORS, FamilyMedia
from .sample_checks import check_sample, invalid_sample
from .unit_kinds import ParquetRowGroups


class Row(Mapping):
    """One parquet row: `row["column"]` (and `row.column`) as the reference's pandas row."""

    __slots__ = ("_cells", "name")

    def __init__(self, cells: dict, name: int):
        self._cells, self.name = cells, name  # `name`: the row's index in its group, as pandas

    def __getitem__(self, key):
        try:
            return self._cells[key]
        except KeyError:
            raise KeyError(f"no column {key!r}; the row has {sorted(self._cells)}") from None

    def __getattr__(self, key):
        if key.startswith("_"):  # never a column; keeps copy/pickle from recursing
            raise AttributeError(key)
        try:
            return self._cells[key]
        except KeyError:
            raise AttributeError(key) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._cells)

    def __len__(self) -> int:
        return len(self._cells)

    def __repr__(self) -> str:
        return f"Row({self.name}, columns={list(self._cells)})"


def builder_from_data(data: dict) -> SampleBuilder:
    """A SampleBuilder holding a `parse_row` result; a `row_sample_invalid` RowDropped when the plan and its
    lists disagree (which would make the packer read the wrong tensors)."""
    if not isinstance(data, Mapping):
        raise invalid_sample(f"parse_row returned a {type(data).__name__}, not the dict of init_data()")
    missing = [key for key in ("sequence_plan", "text_ids_list", "image_tensor_list", "num_tokens") if key not in data]
    if missing:
        raise invalid_sample(f"the returned dict lacks {missing}; start from init_data()")
    plan = data["sequence_plan"]
    if not all(isinstance(value, (list, tuple)) for value in (plan, data["text_ids_list"], data["image_tensor_list"])):
        raise invalid_sample("sequence_plan, text_ids_list and image_tensor_list must be lists")
    texts = sum(isinstance(item, dict) and item.get("type") == "text" for item in plan)
    if texts != len(data["text_ids_list"]) or len(plan) - texts != len(data["image_tensor_list"]):
        raise invalid_sample(
            f"{texts} text and {len(plan) - texts} image item(s) in the plan but "
            f"{len(data['text_ids_list'])} text(s) and {len(data['image_tensor_list'])} image tensor(s)"
        )
    builder = SampleBuilder()
    builder.sequence_plan, builder.text_ids_list = list(plan), list(data["text_ids_list"])
    builder.image_tensor_list, builder.num_tokens = list(data["image_tensor_list"]), data["num_tokens"]
    return builder


_WORST_CASE_TAG = 0x3C5E  # keys validate's extra draws apart from every draw of the run


def planned_length(builder) -> int:
    """A parsed sample's length as the packer counts it: its tokens plus two per plan item."""
    return builder.num_tokens + 2 * len(builder.sequence_plan)


class ParquetStandardIterableDataset(DistributedIterableDataset):
    """Parquet rows handed to `parse_row`; units are (file, row group) pairs.

    Position of a sample: `[unit index in this worker's list, row within the group]`, the
    reference's. `columns` (a class attribute) limits the columns read; None reads all.
    """

    columns: Sequence[str] | None = None
    GROUP_FIELDS: ClassVar[dict[str, Field]] = {"vit_image_transform_args": VIT_TRANSFORM, "file_order": FILE_ORDER}
    DATASET_INFO_FIELDS: ClassVar[dict[str, Field]] = {"parquet_info_path": PARQUET_INFO_PATH}
    # The names alone, for a subclass that adds keys of its own without describing them
    # (`GROUP_KEYS = ParquetStandardIterableDataset.GROUP_KEYS | {"my_key"}`).
    GROUP_KEYS = frozenset(GROUP_FIELDS)
    DATASET_INFO_KEYS = frozenset(DATASET_INFO_FIELDS)
    # `validate` measures each row over this many independent draws of `parse_row` (the
    # run's own first); a family whose longest draw is known should override
    # `worst_case_rows` and report it.
    worst_case_draws: int = 8

    def __init__(
        self,
        dataset_name,
        transform,
        tokenizer,
        vit_transform=None,
        data_dir_list=(),
        num_used_data=(),
        parquet_info=None,
        local_rank=0,
        world_size=1,
        num_workers=8,
        data_status=None,
        *,
        file_order: str = "sorted",
        **options,
    ):
        # `options`: the base class's keyword-only settings (strict, max_consecutive_failures, ...)
        super().__init__(dataset_name, local_rank, world_size, num_workers, **options)
        hold_parquet_rows(self, transform, tokenizer, vit_transform, data_dir_list, data_status, file_order)
        self.data_paths = self.get_data_paths(data_dir_list, num_used_data, parquet_info or {})
        self.set_epoch()

    @classmethod
    def group_kwargs(cls, group):
        """parquet_info and the ViT transform are optional; a subclass's own group keys
        (`GROUP_FIELDS`, `GROUP_KEYS`) reach its constructor as keywords."""
        return parquet_group_kwargs(cls, group)

    def parse_row(self, row: Row) -> dict:
        """The sample of one row, built with `init_data` / `add_*`; `{}` skips the row."""
        raise NotImplementedError(f"{type(self).__name__} must implement parse_row(row)")

    def read_source(self):
        return self.units.kind.read_source(self.units.unit, functools.partial(_columns_of, self.columns))

    def get_data_paths(self, data_dir_list, num_used_data, parquet_info):
        return row_group_units(self, data_dir_list, num_used_data, parquet_info)

    def _unit_samples(self, unit_id, pass_index, start, log, single=False):
        return parsed_unit_samples(self, unit_id, pass_index, start, log, single)

    def worst_case_rows(self, shard, index, unit_id, log):
        """Each row's longest sample over `worst_case_draws` draws of `parse_row`: the run's
        own draw (its skips counted in `log`), then draws from other generators."""
        return parsed_worst_case_rows(self, unit_id, log)


# -- the reading half of a parse_row family, shared with the interleaved family ----------------
def hold_parquet_rows(family, transform, tokenizer, vit_transform, data_dir_list, data_status, file_order) -> None:
    """What a parse_row family holds beside its units: transforms, media, tokenizer, folders."""
    family.transform, family.vit_transform, family.tokenizer = transform, vit_transform, tokenizer
    family.media = FamilyMedia((transform, vit_transform), family.policy, family.image_formats)
    family.data_status = data_status
    family.file_order = file_order
    family.data_dir_list = list(data_dir_list)


def parquet_group_kwargs(family: type, group) -> dict:
    """A parse_row family's constructor keywords: parquet_info and the ViT transform
    (optional), the frame sampler, and the family's own group keys as they are given."""
    kwargs: dict = {"parquet_info": {}}
    if group.args.get("vit_image_transform_args") is not None:
        kwargs["vit_transform"] = group.transform("vit_image_transform_args")
    for dataset in group.dataset_names:
        info = group.parquet_info(dataset, required=False)
        if info is not None:
            base = group.path(dataset, "data_dir", "dir")
            # keyed by file name relative to data_dir, or by full path
            kwargs["parquet_info"].update({storage.join(base, k) if "/" not in k else k: v for k, v in info.items()})
    if "frame_sampler_args" in group.args:
        kwargs["frame_sampler"] = group.frame_sampler()
    consumed = {"vit_image_transform_args", "file_order", "frame_sampler_args", *COMMON_GROUP_KEYS}
    own = {*getattr(family, "GROUP_FIELDS", ()), *getattr(family, "GROUP_KEYS", ())}
    kwargs.update(group.given(*(own - consumed)))
    return kwargs


def _columns_of(columns: Sequence[str] | None, names) -> list:
    return list(names) if columns is None else list(columns)


def row_group_units(family, data_dir_list, num_used_data, parquet_info: dict) -> list:
    """The (file, row group) units of the folders; a file missing from `parquet_info` is
    opened once for its row-group count."""

    def row_groups(path: str, data_dir: str) -> int:
        info = parquet_info.get(path) or parquet_info.get(os.path.relpath(path, data_dir))
        return _count_row_groups(path) if info is None else int(info["num_row_groups"])

    family.units.kind = kind = ParquetRowGroups()
    units, family.listed_files = kind.list_units(data_dir_list, num_used_data, family.file_order, row_groups)
    return units


def _count_row_groups(path: str) -> int:
    try:
        with ParquetReader(path) as reader:
            return reader.num_row_groups
    except Exception as exc:  # an unreadable file is a config problem here, not a row
        raise ConfigError("parquet_info", path, f"no entry, and the file cannot be read: {exc}") from None


def parsed_unit_samples(family, unit_id, pass_index, start, log, single=False):
    """`_unit_samples` of a parse_row family: each row of the unit through `parsed`."""
    unit = family.units.unit(unit_id)
    row_start = start[0] if start else 0
    for row, cells in parquet_rows(family, unit, row_start, log, row_start + 1 if single else None):
        location = family.units.kind.location(unit, (row,))
        draw = family.units.row_random(unit_id, pass_index, row)
        builder = parsed(family, Row(cells, row), draw.rng, location, log)
        if builder is not None:
            yield (row,), builder, draw.state


def parsed_worst_case_rows(family, unit_id: int, log):
    unit = family.units.unit(unit_id)
    for row, cells in parquet_rows(family, unit, 0, log):
        location = family.units.kind.location(unit, (row,))
        first = parsed(family, Row(cells, row), family.units.sample_rng(unit_id, 0, row), location, log)
        if first is not None:
            others = other_draw_lengths(family, Row(cells, row), location, unit_id, row)
            yield location, max([planned_length(first), *others])


def other_draw_lengths(family, row: Row, location: str, unit_id: int, *position: int) -> list[int]:
    """The lengths `parse_row` gives `row` on validate's extra draws (its skips uncounted)."""
    scratch = SkipLog(family.dataset_name, strict=False, max_consecutive_failures=10**12)
    lengths = []
    for draw in range(1, family.worst_case_draws):
        rng = family.units.sample_rng(unit_id, 0, *position, _WORST_CASE_TAG, draw)
        other = parsed(family, row, rng, location, scratch)
        if other is not None:
            lengths.append(planned_length(other))
    return lengths


def parquet_rows(family, unit, row_start: int, log, stop_row: int | None = None):
    """(row, {column: cell}) of the unit's rows from `row_start` (up to `stop_row`)."""
    path, row_group, *_ = span = ParquetRowGroups.span(unit)
    try:
        with family.reads.open_parquet(path) as reader:
            names = reader.schema.names if family.columns is None else list(family.columns)
            table = reader.read_row_group(row_group, names)
    except Exception as exc:  # any pyarrow or I/O failure makes the unit unreadable
        log.skip(SkipReason.UNIT_UNREADABLE, f"{path}, row group {row_group}", str(exc))
        return
    rows = span.rows(table.num_rows, row_start)
    stop = rows.stop if stop_row is None else min(rows.stop, stop_row)
    yield from python_rows(table, rows.start, stop, counted_slices(log, f"{path}, row group {row_group}"))


def parsed(family, row, rng: RandomSource, location: str, log) -> SampleBuilder | None:
    """`family.parse_row(row)` with the row's own generators (`family.np_rng`, and a
    `random.Random` as `family.rng`); its failures become named skips."""
    family.np_rng = rng
    family.rng = random.Random(int(rng.integers(2**63)))
    try:
        data = family.parse_row(row)
        if not data:
            log.skip(SkipReason.PARSE_ROW_EMPTY, location, "parse_row returned an empty result")
            return None
        return check_sample(builder_from_data(data), _strides(family), _vocab_size(family.tokenizer))
    except RowDropped as exc:  # a malformed result (row_sample_invalid), or parse_row's own skip
        reason = exc.reason if isinstance(exc.reason, SkipReason) else SkipReason.PARSE_ROW_FAILED
        log.skip(reason, location, exc.detail[:500])
        return None
    except MEDIA_ERRORS as exc:  # one row's media, not the run
        FamilyMedia.skip(log, location, exc, str(exc)[:500])
        return None
    except BagelDataError:  # a config mistake, or strict mode's BadSampleError
        raise
    except Exception as exc:  # the user's code: any failure is this row's
        log.skip(SkipReason.PARSE_ROW_FAILED, location, f"{type(exc).__name__}: {exc}"[:500])
        return None


def _strides(family) -> dict[str, int]:
    """The patch size of each image item kind, from the family's transforms."""
    vit = getattr(family, "vit_transform", None)
    vae = getattr(family, "transform", None)
    return {"vit_image": getattr(vit, "stride", 1) or 1, "vae_image": getattr(vae, "stride", 1) or 1}


def _vocab_size(tokenizer) -> int | None:
    """Ids must lie under the tokenizer's full size (with added tokens); None when it has none."""
    try:
        return len(tokenizer)
    except TypeError:
        return None
