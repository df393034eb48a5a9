"""`bagel-data prepare tar-counts`: each tar of a folder indexed once, and the counts
written beside them as webdataset's `wids-index.json` (read back by `sources/tar_counts.py`,
so tars on an object store take the walk by rows)."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

from pyarrow import fs as pafs

from ...errors import ConfigError
from ...sources import storage
from ...sources.tar_counts import COUNTS_NAME, FileStat, wids_index
from ...sources.tar_index import mapped_arrays
from ...sources.tar_members import is_tar


def write_counts(folder: str, threads: int = 8) -> tuple[str, dict[str, int]]:
    """Index each tar of `folder` once (the node's tar index cache keeps each index, so the
    first run after this lists no tar again) and write their counts beside them as
    `wids-index.json`. Returns (the file written, each tar's samples)."""
    folder = folder.rstrip("/") if storage.is_uri(folder) else folder
    try:
        entries = _listed_now(folder)
    except FileNotFoundError:
        raise ConfigError("SOURCE", folder, "the folder does not exist") from None
    listed = {storage.join(folder, name): stat for name, stat in entries.items() if is_tar(name)}
    if not listed:
        raise ConfigError("SOURCE", folder, "holds no .tar shards: point it at the folder of the tars")
    sizes = {path: stat[0] for path, stat in listed.items()}

    def count(path: str) -> int:
        return len(mapped_arrays(path, listed[path])[0][0])

    with ThreadPoolExecutor(max(1, min(threads, len(sizes)))) as pool:
        counts = dict(zip(sorted(sizes), pool.map(count, sorted(sizes))))
    target = storage.join(folder, COUNTS_NAME)
    text = json.dumps(wids_index(folder, counts, sizes), indent=1) + "\n"
    if storage.is_uri(target):
        filesystem, inner = storage.resolve(target)
        with filesystem.open_output_stream(inner) as out:
            out.write(text.encode("utf-8"))
    else:
        work = target + ".tmp"
        with open(work, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(work, target)
    return target, counts


def _listed_now(folder: str) -> dict[str, FileStat]:
    """Each entry's (size, mtime_ns), listed now: not the node's shared listing, which a
    dataset read just before may hold (and which the counts file must not be judged by)."""
    if not storage.is_uri(folder):
        with os.scandir(folder) as scan:
            return {item.name: (item.stat().st_size, item.stat().st_mtime_ns) for item in scan if item.is_file()}
    filesystem, inner = storage.resolve(folder)
    infos = filesystem.get_file_info(pafs.FileSelector(inner, recursive=False))
    return {info.base_name: (int(info.size or 0), info.mtime_ns) for info in infos}
