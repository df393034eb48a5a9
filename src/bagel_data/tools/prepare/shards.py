"""Writing prepared rows as parquet shards (`ShardWriter`) into an output folder that holds
no stale shards (`prepare_out_dir`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import ConfigError


class ShardWriter:
    """Rows into `part-%05d.parquet` files of `rows_per_shard` rows in groups of `rows_per_group`."""

    def __init__(self, out_dir: Path, schema: pa.Schema, rows_per_group: int, rows_per_shard: int):
        for key, value in (("rows_per_group", rows_per_group), ("rows_per_shard", rows_per_shard)):
            if value < 1:
                raise ConfigError(key, value, "must be a positive number of rows")
        self.out_dir, self.schema = out_dir, schema
        self.rows_per_group, self.rows_per_shard = rows_per_group, rows_per_shard
        self.pending: list[dict] = []
        self.writer: pq.ParquetWriter | None = None
        self.in_shard = 0
        self.files: list[Path] = []

    def add(self, row: dict) -> None:
        self.pending.append(row)
        # A shard size that is not a multiple of the group size ends with a shorter group.
        if len(self.pending) >= min(self.rows_per_group, self.rows_per_shard - self.in_shard):
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        if self.writer is None:
            self.files.append(self.out_dir / f"part-{len(self.files):05d}.parquet")
            self.writer = pq.ParquetWriter(self.files[-1], self.schema)
        table = pa.Table.from_pylist(self.pending, schema=self.schema)
        self.writer.write_table(table, row_group_size=len(self.pending))
        self.in_shard += len(self.pending)
        self.pending = []
        if self.in_shard >= self.rows_per_shard:
            self._close_shard()

    def _close_shard(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.writer, self.in_shard = None, 0

    def close(self) -> tuple[Path, ...]:
        try:
            self._flush()
        finally:
            self._close_shard()
        return tuple(self.files)


def prepare_out_dir(out_dir: Path, overwrite: bool) -> Path:
    """Create `out_dir`; remove its parquet files if `overwrite`, else refuse a folder holding some."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    existing = sorted(out_dir.glob("*.parquet"))
    if existing and not overwrite:
        # The readers take every parquet file of the folder: stale shards would be read too.
        raise ConfigError(
            "out_dir",
            str(out_dir),
            f"already holds {len(existing)} parquet file(s); "
            "use an empty folder or overwrite=True (--overwrite) to replace them",
        )
    for path in existing:
        path.unlink()
    return out_dir
