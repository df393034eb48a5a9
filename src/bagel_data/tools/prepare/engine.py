"""Sharded preparation, the same on one process (`local`) and on a Ray cluster (`ray`).

The input rows are cut into batches of `rows_per_shard` input rows; batch `k` becomes the file
`part-k` (the rows of it that are not dropped) through one pure function, `convert_shard`.
The local engine maps it serially, the Ray engine on Ray Data; both hand the results back in
order to the same writer, so the files are the same byte for byte. A shard is finished when
its marker `.prepare-state/part-k.done` (written after the file, holding the shard's drop
notes, a digest of its input rows and the file's size) exists and still matches: a rerun of
the same job with `resume` checks each finished shard (file present, size and row count, same
input rows) and redoes the others.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow.parquet as pq

from ...errors import ConfigError
from .common import Progress, Rows
from .report import PrepareReport, RowNote
from .shard_jobs import ShardJob, ShardResult, map_local
from .shards import prepare_out_dir

ENGINES = ("local", "ray")
STATE_DIR = ".prepare-state"


def mapper(engine: str, address: str | None, num_cpus: int | None):
    """The function that maps `convert_shard` over shards on `engine`, checked before any work."""
    if engine not in ENGINES:
        raise ConfigError("engine", engine, f"use one of {', '.join(ENGINES)}")
    if engine == "local":
        if address is not None:
            raise ConfigError("address", address, "only --engine ray connects to a cluster")
        return map_local
    from .ray_engine import ray_mapper  # Ray is an optional extra: imported only when asked

    return ray_mapper(address, num_cpus)


# -- the shard folder: files, markers, restarts --------------------------------------------
class ShardFolder:
    """The `part-k` files of one job in `folder`, with a marker per finished shard."""

    def __init__(self, folder: Path, job: ShardJob, num_shards: int, overwrite: bool, resume: bool = False):
        self.folder, self.job, self.num_shards = Path(folder), job, num_shards
        self.state = self.folder / STATE_DIR
        fingerprint = {**job.fingerprint, "num_shards": num_shards, "suffix": job.suffix}
        saved = self._saved_fingerprint()
        if saved is not None and not (overwrite or resume):
            done = sum(self.marker(index).exists() for index in range(num_shards))
            raise ConfigError(
                "out_dir",
                str(self.folder),
                f"already holds a run ({done} shard(s) finished); "
                "use resume=True (--resume) to finish it, or overwrite=True (--overwrite) to start over",
            )
        if overwrite or saved is None:
            if overwrite:
                shutil.rmtree(self.state, ignore_errors=True)
                for path in self.folder.glob(f"part-*{job.suffix}"):
                    path.unlink()
            prepare_out_dir(self.folder, overwrite)  # refuses parquet files of another run
            self.state.mkdir(parents=True, exist_ok=True)
            _write_atomic(self.state / "job.json", json.dumps(fingerprint, indent=2).encode())
        elif saved != fingerprint:
            raise ConfigError(
                "out_dir",
                str(self.folder),
                "holds a run of another job (other input or options), so it cannot be resumed; "
                "use overwrite=True (--overwrite) to start over",
            )
        for index in range(num_shards):  # a file without its marker was cut short: redo it
            if not self.marker(index).exists():
                self.path(index).unlink(missing_ok=True)

    def _saved_fingerprint(self) -> dict | None:
        try:
            return json.loads((self.state / "job.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def path(self, index: int) -> Path:
        return self.folder / f"part-{index:05d}{self.job.suffix}"

    def marker(self, index: int) -> Path:
        return self.state / f"part-{index:05d}.done"

    def finished(self, index: int, rows: Rows) -> ShardResult | None:
        """Shard `index` when its marker stands for it: same input rows (their digest), and a
        file that exists with the marker's size and row count (none for an empty shard).
        None otherwise, and the shard is redone: a deleted or replaced shard is never kept."""
        try:
            saved = json.loads(self.marker(index).read_text(encoding="utf-8"))
            notes = {key: tuple(RowNote(**note) for note in saved[key]) for key in ("dropped", "fixed")}
            rows_written = int(saved["rows_written"])
            intact = saved.get("input_digest") == rows_digest(rows) and self._file_matches(index, saved)
        except (OSError, ValueError, TypeError, KeyError):
            intact = False
        if not intact:
            self.marker(index).unlink(missing_ok=True)
            self.path(index).unlink(missing_ok=True)
            return None
        sources = tuple((source, count) for source, count in saved.get("sources", []))  # older markers lack it
        return ShardResult(index, None, rows_written, notes["dropped"], notes["fixed"], sources)

    def _file_matches(self, index: int, saved: dict) -> bool:
        path = self.path(index)
        if not saved["rows_written"]:
            return not path.exists()
        if not path.is_file() or path.stat().st_size != saved.get("file_size"):
            return False
        if self.job.suffix == ".parquet":
            return pq.read_metadata(path).num_rows == saved["rows_written"]
        return path.read_bytes().count(b"\n") == saved["rows_written"]

    def save(self, result: ShardResult, rows: Rows) -> None:
        """The file first, then its marker: a marker always stands for a complete file."""
        if result.data is not None:
            _write_atomic(self.path(result.index), result.data)
        marker = {
            "rows_written": result.rows_written,
            "input_digest": rows_digest(rows),
            "file_size": None if result.data is None else len(result.data),
            "dropped": [dataclasses.asdict(note) for note in result.dropped],
            "fixed": [dataclasses.asdict(note) for note in result.fixed],
            "sources": [list(pair) for pair in result.sources],
        }
        _write_atomic(self.marker(result.index), json.dumps(marker, ensure_ascii=False).encode("utf-8"))

    def files(self) -> tuple[Path, ...]:
        return tuple(self.path(k) for k in range(self.num_shards) if self.path(k).exists())


def rows_digest(rows: Rows) -> str:
    """A digest of a shard's input rows (locations and contents as read): a changed input
    whose row count did not change still changes it."""
    digest = hashlib.sha256()
    for location, row in rows:
        digest.update(repr((location, row, _file_stamps(row))).encode("utf-8", "backslashreplace"))
    return digest.hexdigest()[:32]


def _file_stamps(row: object) -> list:
    """Size and mtime of the files a row holds as paths (a folder row's image), so an image
    rewritten in place also changes the digest; rows that name files by string are covered
    by their text only."""
    parts = row if isinstance(row, (tuple, list)) else (row,)
    stamps: list[tuple[int, int] | None] = []
    for part in parts:
        if isinstance(part, Path):
            try:
                info = part.stat()
                stamps.append((info.st_size, info.st_mtime_ns))
            except OSError:
                stamps.append(None)
    return stamps


def _write_atomic(path: Path, data: bytes) -> None:
    partial = path.with_name(path.name + ".tmp")
    partial.write_bytes(data)
    os.replace(partial, path)


def run_shards(
    job: ShardJob,
    rows: Rows,
    folder: Path,
    *,
    rows_per_shard: int,
    engine: str = "local",
    address: str | None = None,
    num_cpus: int | None = None,
    overwrite: bool = False,
    resume: bool = False,
    progress: Progress | None = None,
) -> tuple[PrepareReport, ShardFolder]:
    """Convert every shard of `rows` not finished yet on `engine` and write it to `folder`."""
    if rows_per_shard < 1:
        raise ConfigError("rows_per_shard", rows_per_shard, "must be a positive number of rows")
    map_shards = mapper(engine, address, num_cpus)
    batches = [rows[start : start + rows_per_shard] for start in range(0, len(rows), rows_per_shard)]
    shards = ShardFolder(folder, job, len(batches), overwrite, resume)
    results: dict[int, ShardResult] = {}
    for index in range(len(batches)):
        if (done := shards.finished(index, batches[index])) is not None:
            results[index] = done
    todo = [(index, batch) for index, batch in enumerate(batches) if index not in results]
    rows_done = sum(len(batches[index]) for index in results)
    if progress is not None:
        progress(rows_done, len(rows))
    for result in _checked(map_shards(job, todo), [index for index, _ in todo]):
        shards.save(result, batches[result.index])
        results[result.index] = dataclasses.replace(result, data=None)
        rows_done += len(batches[result.index])
        if progress is not None:
            progress(rows_done, len(rows))
    ordered = [results[index] for index in range(len(batches))]
    sources: collections.Counter[str] = collections.Counter()
    for result in ordered:
        sources.update(dict(result.sources))
    report = PrepareReport(
        sum(result.rows_written for result in ordered),
        shards.files(),
        tuple(note for result in ordered for note in result.dropped),
        tuple(note for result in ordered for note in result.fixed),
        dict(sources),
    )
    if report.rows_written == 0:  # nothing to resume: a corrected rerun must not need --overwrite
        shutil.rmtree(shards.state, ignore_errors=True)
    return report, shards


def _checked(results: Iterable[ShardResult], expected: list[int]) -> Iterator[ShardResult]:
    """The engine's results, checked to come one per shard, in shard order."""
    count = 0
    for count, result in enumerate(results, 1):
        if count > len(expected) or result.index != expected[count - 1]:
            raise RuntimeError(f"the engine returned shard {result.index} out of order")
        yield result
    if count != len(expected):
        raise RuntimeError(f"the engine returned {count} of {len(expected)} shards")
