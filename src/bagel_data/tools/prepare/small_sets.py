"""The warning a prepare gives when it wrote fewer sharding units than a typical job needs:
said at prepare time, with the option that fixes it, instead of at `validate` ("needs at
least N") or at the first training step.

A T2I group shards by parquet file; edit and interleaved groups by row group. The need is
validate's own rule (`sharding.units_needed`) for a modest job, `TYPICAL_JOB`.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from ...sharding import units_needed

TYPICAL_JOB = (4, 2)  # (ranks, DataLoader workers per rank): a small multi-GPU job
UNIT_OPTION = {"t2i": ("parquet file", "--rows-per-shard"), "edit": ("row group", "--rows-per-group"),
               "interleaved": ("row group", "--rows-per-group")}  # fmt: skip


def count_units(kind: str, files: tuple[Path, ...]) -> int:
    """The units a reader of `kind` will shard the parquet `files` into."""
    shards = [path for path in files if path.suffix == ".parquet"]
    if UNIT_OPTION[kind][0] == "parquet file":
        return len(shards)
    return sum(pq.read_metadata(path).num_row_groups for path in shards)


def few_units_warning(kind: str, files: tuple[Path, ...], rows_written: int) -> str | None:
    """A warning when `files` hold fewer units than `TYPICAL_JOB` needs; None otherwise or
    for a kind that does not shard by files or row groups (VLM JSONL shards by line)."""
    if kind not in UNIT_OPTION or rows_written == 0:
        return None
    ranks, workers = TYPICAL_JOB
    needed, units = units_needed(ranks, workers), count_units(kind, files)
    if units >= needed:
        return None
    unit, option = UNIT_OPTION[kind]
    job = f"{ranks} ranks x {workers} workers needs {needed}"
    if rows_written < needed:
        fix = f"only {rows_written} rows were written, so run such a set with fewer ranks or workers"
    else:
        fix = f"rerun with {option} {rows_written // needed} (or lower) and --overwrite"
    return f"{units} {unit}(s) written, and the {kind} family shards by {unit}: a job of {job}; {fix}"
