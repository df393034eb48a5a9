"""What a checkpoint's data was: each input file of each group with its size.

Resume is exact only on the same inputs. The unit count alone does not show a deleted or
added parquet file (files repeat to fill `num_used_data`), so a checkpoint records each
group's distinct input files and their sizes, and resume compares them file by file: an
added, removed or resized file is a `ResumeError` naming it. Up to `MAX_LISTED` files are
listed; beyond that only a digest is kept (the checkpoint stays small), and a change is
reported with the counts.
"""

from __future__ import annotations

import hashlib

import pyarrow.fs as pafs

from ..errors import ResumeError
from ..sources import storage

MAX_LISTED = 256


def file_size(path: str) -> int:
    """Bytes of `path`, or -1 when it cannot be found."""
    filesystem, inner = storage.resolve(path)
    info = filesystem.get_file_info(inner)
    return -1 if info.type == pafs.FileType.NotFound else int(info.size or 0)


def input_record(paths: list[str]) -> dict:
    """The record of one group's distinct input files (sorted, with their sizes)."""
    files = [[path, file_size(path)] for path in sorted(set(paths))]
    digest = hashlib.sha256(repr(files).encode()).hexdigest()[:32]
    record = {"count": len(files), "digest": digest}
    if len(files) <= MAX_LISTED:
        record["files"] = files
    return record


def check_inputs(group: str, saved: dict | None, current: dict | None) -> None:
    """Raise ResumeError naming what changed between the checkpoint's inputs and these."""
    if saved is None or current is None or saved.get("digest") == current["digest"]:
        return  # same inputs, or a checkpoint from before inputs were recorded
    fix = "resume with the data the checkpoint was taken on, or start this group afresh"
    if "files" not in saved or "files" not in current:
        raise ResumeError(
            f"{group}: the input files changed since the checkpoint ({saved['count']} files then, "
            f"{current['count']} now, or their sizes differ); {fix}"
        )
    then, now = dict(map(tuple, saved["files"])), dict(map(tuple, current["files"]))
    problems = [f"{path} was removed" for path in then if path not in now]
    problems += [f"{path} was added" for path in now if path not in then]
    problems += [
        f"{path} changed ({then[path]} bytes then, {now[path]} now)"
        for path in then
        if path in now and then[path] != now[path]
    ]
    raise ResumeError(f"{group}: the inputs changed since the checkpoint: {'; '.join(problems[:5])}; {fix}")
