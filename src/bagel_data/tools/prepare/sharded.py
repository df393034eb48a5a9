"""`prepare_sharded`: the four prepare tools on an engine (`local` or `ray`), restartable.

Each kind lists its input rows exactly as the plain tool does and converts a row with the
plain tool's own per-row function; only the shard layout differs: file `part-k` holds what
is kept of input rows `k*rows_per_shard ...`, so that shards can be made independently (a
shard whose rows are all dropped has no file). See `engine.py`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from ...errors import ConfigError
from ...families.interleaved import DEFAULTS, INTERLEAVED_SCHEMA, check_segment_defaults
from ...formats import EDIT_SCHEMA, T2I_SCHEMA
from ...sources.tar_members import load_class_names
from .common import SOURCE_KEY, Progress, Rows, manifest_rows
from .edit import TripleColumns, edit_rows, later_turns_warning, table_or_manifest_record, write_parquet_info
from .engine import run_shards
from .interleaved import document_segments, row_group_size, write_run_config
from .report import PrepareReport, RowNote
from .shard_jobs import ShardJob, jsonl_bytes, parquet_bytes
from .small_sets import few_units_warning
from .staging import discard, publish, work_folder
from .stored_images import check_format
from .t2i import folder_rows, numbered_captions, t2i_row, table_columns, table_t2i_row
from .tables import TableRow, parquet_files, table_rows
from .vlm import fix_vlm_row, vlm_rows
from .webdataset import TarSample, tar_captions, tar_files, tar_image, tar_rows

KINDS = ("t2i", "edit", "vlm", "interleaved")


@dataclasses.dataclass
class _Plan:
    rows: Rows
    job: ShardJob
    folder: Path
    rows_per_shard: int
    finish: Callable[[PrepareReport], PrepareReport] = lambda report: report


def prepare_sharded(
    kind: str,
    source: str | Path,
    out: str | Path,
    *,
    engine: str = "local",
    address: str | None = None,
    num_cpus: int | None = None,
    overwrite: bool = False,
    resume: bool = False,
    progress: Progress | None = None,
    **options,
) -> PrepareReport:
    """Run `prepare_<kind>` (same arguments as `options`) on `engine`, shard by shard.

    `engine="ray"` maps the shards on Ray Data: a local cluster of `num_cpus` CPUs, or the
    running one at `address`. With `resume`, a rerun of the same command into the same
    folder skips the shards already written (a crashed or interrupted run). Shards are
    written beside `out` and moved into it at the end (`staging.py`): a run that fails or
    writes nothing leaves `out` as it was.
    """
    plans: dict[str, Callable[..., _Plan]] = {"t2i": _t2i, "edit": _edit, "vlm": _vlm, "interleaved": _interleaved}
    if kind not in plans:
        raise ConfigError("kind", kind, f"use one of {', '.join(KINDS)}")
    plan = plans[kind](Path(source), Path(out), **options)
    # Shards that land in OUT are written beside it first (staging.py); VLM's parts already are.
    staged = plan.folder == Path(out)
    folder = work_folder(plan.folder, overwrite) if staged else plan.folder
    report, _ = run_shards(
        plan.job, plan.rows, folder, rows_per_shard=plan.rows_per_shard, engine=engine, address=address,
        num_cpus=num_cpus, overwrite=overwrite, resume=resume, progress=progress,
    )  # fmt: skip
    if report.rows_written == 0:  # nothing to keep: no empty parquet_info.json or JSONL either
        discard(folder, plan.folder if staged else Path(out))
        return report
    if staged:
        report = dataclasses.replace(report, files_written=publish(folder, plan.folder, report.files_written))
    report = plan.finish(report)
    warning = few_units_warning(kind, report.files_written, report.rows_written)
    return report if warning is None else dataclasses.replace(report, warnings=(*report.warnings, warning))


def _fingerprint(kind: str, source: Path, rows: Rows, **options) -> dict:
    shown = {key: str(value) if isinstance(value, Path) else value for key, value in options.items()}
    return {"kind": kind, "source": os.path.abspath(source), "input_rows": len(rows), "options": shown}


def _check_sizes(rows_per_group: int, rows_per_shard: int) -> None:
    for key, value in (("rows_per_group", rows_per_group), ("rows_per_shard", rows_per_shard)):
        if value < 1:
            raise ConfigError(key, value, "must be a positive number of rows")


# -- T2I ---------------------------------------------------------------------------------
def _t2i_convert(
    layout: str, root: Path, fmt: str | None, max_side: int | None, columns: tuple[str, ...] | None,
    class_names: tuple[str, ...] | None, location: str, row: object,
):  # fmt: skip
    if columns is not None:
        assert isinstance(row, TableRow)
        return table_t2i_row(row, columns, root, fmt, max_side), []
    if layout != "tar":
        return t2i_row(row, layout == "folder", root, fmt, max_side), []
    assert isinstance(row, TarSample)
    captions, source = tar_captions(row, class_names)
    text = numbered_captions(captions)
    return {"image": tar_image(row, fmt, max_side), "captions": text, SOURCE_KEY: source}, []


def _t2i(
    source: Path, out_dir: Path, *, rows_per_group: int = 100, rows_per_shard: int = 1000,
    reencode: str | None = None, max_side: int | None = None, image_root: str | Path | None = None,
    image_column: str | None = None, caption_column: str | Sequence[str] | None = None,
    class_names: Sequence[str] | str | None = None, split: str | None = None,
) -> _Plan:  # fmt: skip
    fmt = check_format(reencode)
    names = load_class_names(class_names, "class_names")
    _check_sizes(rows_per_group, rows_per_shard)
    if max_side is not None and max_side < 1:
        raise ConfigError("max_side", max_side, "must be a positive number of pixels")
    if not source.exists():
        raise ConfigError("source", str(source), "neither a folder, a tar file nor a manifest file")
    tars = tar_files(source)
    tables = [] if tars else parquet_files(source, split)
    layout = "tar" if tars else "table" if tables else "folder" if source.is_dir() else "manifest"
    columns = table_columns(tables, image_column, caption_column) if tables else None
    rows = {"tar": lambda: tar_rows(tars), "table": lambda: table_rows(tables), "folder": lambda: folder_rows(source),
            "manifest": lambda: manifest_rows(source)}[layout]()  # fmt: skip
    root = Path(image_root or (source if layout == "table" and source.is_dir() else source.parent))
    fingerprint = _fingerprint("t2i", source, rows, rows_per_group=rows_per_group, reencode=reencode,
                               max_side=max_side, image_root=root, columns=list(columns or ()),
                               class_names=names, split=split)  # fmt: skip
    convert = functools.partial(_t2i_convert, layout, root, fmt, max_side, columns, tuple(names) if names else None)
    job = ShardJob(convert, functools.partial(parquet_bytes, T2I_SCHEMA, rows_per_group), ".parquet", fingerprint)
    return _Plan(rows, job, out_dir, rows_per_shard)


# -- edit --------------------------------------------------------------------------------
def _edit_convert(root: Path, columns: TripleColumns, table: tuple | None, location: str, row: object):
    return table_or_manifest_record(row, root, columns, table), []


def _edit(
    source: Path, out_dir: Path, *, rows_per_group: int = 16, rows_per_shard: int = 1024,
    image_root: str | Path | None = None, data_dir: str | None = None, columns: TripleColumns = TripleColumns(),
    split: str | None = None,
) -> _Plan:  # fmt: skip
    _check_sizes(rows_per_group, rows_per_shard)
    if not source.exists():
        raise ConfigError("manifest_jsonl", str(source), "the file does not exist")
    root = Path(image_root or (source if source.is_dir() else source.parent))
    rows, table = edit_rows(source, columns, split)
    fingerprint = _fingerprint("edit", source, rows, rows_per_group=rows_per_group, image_root=root,
                               columns=dataclasses.asdict(columns), table=list(table or ()), split=split)  # fmt: skip
    job = ShardJob(functools.partial(_edit_convert, root, columns, table),
                   functools.partial(parquet_bytes, EDIT_SCHEMA, rows_per_group), ".parquet", fingerprint)  # fmt: skip

    def finish(report: PrepareReport) -> PrepareReport:
        info = write_parquet_info(out_dir, report.files_written, data_dir)
        turns = later_turns_warning(dict(report.sources))
        warnings = report.warnings if turns is None else (*report.warnings, turns)
        return dataclasses.replace(report, files_written=(*report.files_written, info), warnings=warnings)

    return _Plan(rows, job, out_dir, rows_per_shard, finish)


# -- interleaved -------------------------------------------------------------------------
def _interleaved_convert(root: Path, location: str, row: object):
    return document_segments(row, root), []


def _interleaved(
    source: Path, out_dir: Path, *, image_root: str | Path | None = None, rows_per_group: int = 64,
    rows_per_shard: int = 1024, segment_defaults: dict | None = None,
) -> _Plan:  # fmt: skip
    _check_sizes(rows_per_group, rows_per_shard)
    if not source.is_file():
        raise ConfigError("docs_jsonl", str(source), "the file does not exist")
    defaults = check_segment_defaults("segment_defaults", segment_defaults or dict(DEFAULTS))
    root, rows = Path(image_root or source.parent), manifest_rows(source)
    rows_per_group = row_group_size(rows_per_group, len(rows))  # enough units for a few workers
    fingerprint = _fingerprint("interleaved", source, rows, rows_per_group=rows_per_group, image_root=root)
    encode = functools.partial(parquet_bytes, INTERLEAVED_SCHEMA, rows_per_group)
    job = ShardJob(functools.partial(_interleaved_convert, root), encode, ".parquet", fingerprint)

    def finish(report: PrepareReport) -> PrepareReport:
        files = report.files_written
        if not files:
            return report
        info = write_parquet_info(out_dir, files)
        return dataclasses.replace(
            report, files_written=(*files, info, *write_run_config(out_dir, len(files), defaults))
        )

    return _Plan(rows, job, out_dir, rows_per_shard, finish)


# -- VLM ---------------------------------------------------------------------------------
def _vlm_convert(root: Path, decode_check: bool, location: str, row: object):
    fixes: list[RowNote] = []
    note = lambda kind, detail: fixes.append(RowNote(location, kind.value, detail))  # noqa: E731
    return fix_vlm_row(row, root, note, decode_check), fixes


def _vlm(
    source: Path, out_jsonl: Path, *, image_root: str | Path, rows_per_shard: int = 10000, decode_check: bool = True
) -> _Plan:
    root = Path(image_root)
    if not root.is_dir():
        raise ConfigError("image_root", str(root), "not a folder")
    if not source.is_file():
        raise ConfigError("source", str(source), "the file does not exist")
    _check_sizes(1, rows_per_shard)
    rows = vlm_rows(source)
    job = ShardJob(functools.partial(_vlm_convert, root, decode_check), jsonl_bytes, ".jsonl",
                   _fingerprint("vlm", source, rows, image_root=root, decode_check=decode_check))  # fmt: skip
    parts = out_jsonl.with_name(out_jsonl.name + ".parts")

    def finish(report: PrepareReport) -> PrepareReport:
        """The parts joined in order into `out_jsonl`; the parts folder goes once that is done."""
        partial = out_jsonl.with_name(out_jsonl.name + ".tmp")
        with partial.open("wb") as handle:
            for path in report.files_written:
                with path.open("rb") as part:
                    shutil.copyfileobj(part, handle)
        os.replace(partial, out_jsonl)
        shutil.rmtree(parts)
        return dataclasses.replace(report, files_written=(out_jsonl,))

    return _Plan(rows, job, parts, rows_per_shard, finish)
