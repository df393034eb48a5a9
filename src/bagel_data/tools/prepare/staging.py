"""Where a sharded prepare writes until it is done: a hidden folder beside the output
(`.OUT.partial`), moved into OUT once every shard is written. A run that fails, is cut
short or writes nothing leaves OUT as it was (no shards a training run would take for a
whole dataset, no `parquet_info.json` of `{}`); the partial folder keeps what `--resume`
needs to finish it.

A finished OUT keeps its shard markers (`engine.STATE_DIR`), so a later `--resume` into
OUT still redoes only a shard that was deleted or changed there.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...errors import ConfigError
from .engine import STATE_DIR


def partial_folder(out: Path) -> Path:
    return out.with_name(f".{out.name}.partial")


def work_folder(out: Path, overwrite: bool) -> Path:
    """OUT itself when it holds a run's markers and is not being replaced (a resume, or the
    engine's refusal to mix runs); else the partial folder. Refuses an OUT holding shards of
    something else unless `overwrite`, before any work."""
    if (out / STATE_DIR).is_dir() and not overwrite:
        return out
    if out.exists() and not out.is_dir():
        raise ConfigError("out_dir", str(out), "is a file; name a folder for the shards")
    existing = sorted(out.glob("*.parquet")) if out.is_dir() else []
    if existing and not overwrite:
        # The readers take every parquet file of the folder: stale shards would be read too.
        raise ConfigError(
            "out_dir",
            str(out),
            f"already holds {len(existing)} parquet file(s); "
            "use an empty folder or overwrite=True (--overwrite) to replace them",
        )
    return partial_folder(out)


def publish(folder: Path, out: Path, files: tuple[Path, ...]) -> tuple[Path, ...]:
    """Move a finished run from `folder` into `out` (replacing OUT's shards and markers, as
    `overwrite` asked) and return `files` as they are named there."""
    if folder == out:
        return files
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.parquet"):
        stale.unlink()
    shutil.rmtree(out / STATE_DIR, ignore_errors=True)
    for path in sorted(folder.iterdir()):
        os.replace(path, out / path.name)
    folder.rmdir()
    return tuple(out / path.name for path in files)


def discard(folder: Path, out: Path) -> None:
    """A run that wrote nothing: its partial folder goes (nothing to resume)."""
    if folder != out:
        shutil.rmtree(folder, ignore_errors=True)
