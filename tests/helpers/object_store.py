"""Many tiny parquet shards for the object-store tests, made from one written file (copies:
1,000 shards cost one parquet write). The store itself is bench/moto_store.py."""

from __future__ import annotations

import shutil
from pathlib import Path


def copies(one_file: str | Path, folder: Path, count: int, pattern: str = "part-{:05d}.parquet") -> list[Path]:
    """`count` copies of `one_file` in `folder`, named by `pattern`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / pattern.format(i) for i in range(count)]
    for path in paths:
        shutil.copyfile(one_file, path)
    return paths
