"""Which files of a `data_dir` are the dataset: Hub-style splits and `data_files` patterns.

A folder laid out as the Hugging Face Hub lays out a dataset holds several splits side by
side (`data/train-00000-of-00003.parquet` beside `data/test-00000-of-00001.parquet`, or
`train/` and `test/` folders). Read whole, it trains on the test split. One rule, here,
decides for every family that lists a `data_dir` (through `sources/parquet.py`) and for
`prepare`:

* `data_files` (a `dataset_info` key, as `datasets.load_dataset` takes it: a glob pattern
  relative to `data_dir`, a list of them, or `{split: patterns}`) names the files outright.
* Otherwise a file's name says its split: `{split}-NNNNN-of-NNNNN.ext` (any split name), or
  a name that starts with a split word followed by `-`, `_`, `.` or a digit (`train.parquet`,
  `test_0.parquet`); a file in a `{split}/` folder is of that split. The Hub's aliases hold:
  training -> train; validation, valid, val, dev -> validation; testing, eval, evaluation -> test.
* A Hub repository's root (no data files, a `data/` folder) reads its `data/` folder.
* A folder whose files name no (known) split is read whole, as before. One whose files name
  splits reads `split` (default `train`); a split it lacks is a ConfigError naming those it
  has. Files that name a split beside files that name none are a ConfigError naming both:
  nothing tells which split the others belong to.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from ..errors import ConfigError
from . import storage

DEFAULT_SPLIT = "train"
ALIASES = {
    "train": "train", "training": "train",
    "validation": "validation", "valid": "validation", "val": "validation", "dev": "validation",
    "test": "test", "testing": "test", "eval": "test", "evaluation": "test",
}  # fmt: skip
_SHARDED = re.compile(r"(?P<split>.+?)-\d{5}-of-\d{5}[.-]")
_GLOB = re.compile(r"[*?\[]")
FileStat = tuple[int, int | None]  # (bytes, modification time in ns) as the listing gave them


class DataDir(str):
    """A `data_dir` path that also carries which of its files are the dataset (`split`,
    `data_files`); it is the path everywhere a path is expected (hence `split_name`: `split`
    would hide `str.split`, which path code calls)."""

    split_name: str | None
    data_files: object

    def __new__(cls, path: str, split: str | None = None, data_files: object = None) -> DataDir:
        made = super().__new__(cls, path)
        made.split_name, made.data_files = split, data_files
        return made

    def __reduce__(self):
        return (DataDir, (str(self), self.split_name, self.data_files))


def data_dir_of(where: str, path: str, entry: dict) -> str:
    """`path` (a dataset_info entry's data_dir) with the entry's `split` and `data_files`;
    the path itself when it names neither. `where`: the entry's dotted name, for errors."""
    split, data_files = entry.get("split"), entry.get("data_files")
    if entry.get("jsonl_path") is not None:  # VLM, interleaved JSONL: data_dir is a media root, never listed
        given = sorted(key for key in ("split", "data_files") if entry.get(key) is not None)
        if given:
            raise ConfigError(
                f"{where}.{given[0]}", entry[given[0]], "this dataset is read from its jsonl_path and its data_dir "
                "is only the folder its media names are relative to: remove it",
            )  # fmt: skip
    if isinstance(data_files, dict):
        for name, patterns in data_files.items():
            if not (isinstance(patterns, str) and patterns) and not (
                isinstance(patterns, list) and patterns and all(isinstance(p, str) and p for p in patterns)
            ):
                raise ConfigError(f"{where}.data_files.{name}", patterns, "must be a glob pattern or a list of them")
        if split is not None and split not in data_files:
            raise ConfigError(f"{where}.split", split, f"data_files names the splits {sorted(data_files)}; use one")
    return path if split is None and data_files is None else DataDir(path, split, data_files)


def canonical(split: str) -> str:
    return ALIASES.get(split.lower(), split)


def split_of(relative: str, requested: str | None = None) -> str | None:
    """The split a file's path (relative to its data_dir, `/`-separated) names, or None."""
    *folders, name = relative.split("/")
    sharded = _SHARDED.match(name)
    if sharded:
        return canonical(sharded.group("split"))
    words = sorted(set(ALIASES) | ({requested} if requested else set()), key=len, reverse=True)
    for word in words:
        if re.match(rf"{re.escape(word)}(?=[-_.0-9])", name, re.IGNORECASE):
            return canonical(word)
    for folder in reversed(folders):
        if folder.lower() in ALIASES or folder == requested:
            return canonical(folder)
    return None


def choose_split(paths: Sequence[str], split: str | None, where: str) -> list[str]:
    """The paths (relative, `/`-separated) of `split` (None: `train`, or all when no
    file names a known split), in their order; a ConfigError when that cannot be told."""
    tags = {path: split_of(path, split) for path in paths}
    present = sorted({tag for tag in tags.values() if tag is not None})
    if split is None and not set(present) & set(ALIASES.values()):
        return list(paths)  # no known split named (e.g. `shard-00000-of-00009`): one dataset
    if not present:
        raise ConfigError(
            "split", split, f"no file of {where} names a split ({_some(paths)}); remove split: or point data_dir at it"
        )
    untagged = [path for path, tag in tags.items() if tag is None]
    if untagged:
        raise ConfigError(
            "data_dir",
            where,
            f"holds files of the split(s) {present} beside files that name no split ({_some(untagged)}): "
            "nothing tells which split those are. Name them {split}-NNNNN-of-NNNNN, move them to a folder "
            "of their own, or list the dataset's files with data_files:",
        )
    want = canonical(split or DEFAULT_SPLIT)
    chosen = [path for path in paths if tags[path] == want]
    if not chosen:
        raise ConfigError(
            "split",
            split or DEFAULT_SPLIT,
            f"{where} holds the split(s) {present}, not {want!r}: set split: to one of them "
            "in dataset_info (`--split` for prepare)",
        )
    return chosen


def list_data_files(
    data_dir: str, suffixes: tuple[str, ...], sort: bool = True, aside: dict | None = None
) -> list[tuple[str, FileStat]]:
    """(path, (size, mtime_ns)) of each data file of `data_dir` (ending in one of `suffixes`)
    that is the dataset: its `data_files`, else its `split`'s files (module docstring).
    `aside`: gets every entry of each folder listed, by folder (a tar folder's counts file
    is found there without listing it again: `sources/tar_counts.py`)."""
    split, patterns = (data_dir.split_name, data_dir.data_files) if isinstance(data_dir, DataDir) else (None, None)
    if patterns is not None:
        return _matched(data_dir, _patterns(patterns, split), suffixes, sort)
    entries = storage.list_entries(data_dir, sort=sort)
    if aside is not None:
        aside[str(data_dir)] = entries
    files = {entry.name: (entry.size, entry.mtime_ns) for entry in entries if entry.name.endswith(suffixes)}
    if files:
        return [(storage.join(data_dir, name), files[name]) for name in choose_split(list(files), split, data_dir)]
    folders = [entry.name for entry in entries if split_of(entry.name + "/x", split) is not None]
    if not folders and any(entry.name == "data" for entry in entries):  # a Hub repository's root
        inner = storage.join(data_dir, "data")
        return list_data_files(DataDir(inner, split) if split is not None else inner, suffixes, sort, aside)
    if not folders:
        if split is not None:
            raise ConfigError("split", split, f"{data_dir} holds no {split}/ folder and no split files")
        return []
    want = canonical(split or DEFAULT_SPLIT)
    mine = [name for name in folders if canonical(name) == want]
    if not mine:
        raise ConfigError(
            "split", split or DEFAULT_SPLIT, f"{data_dir} holds the split folder(s) {sorted(folders)}, not {want!r}: "
            "set split: to one of them in dataset_info (`--split` for prepare)",
        )  # fmt: skip
    folder = storage.join(data_dir, mine[0])
    listed = storage.list_entries(folder, sort=sort)
    if aside is not None:
        aside[folder] = listed
    return [(storage.join(folder, e.name), (e.size, e.mtime_ns)) for e in listed if e.name.endswith(suffixes)]


def _patterns(data_files: object, split: str | None) -> list[str]:
    if isinstance(data_files, str):
        return [data_files]
    if isinstance(data_files, dict):
        want = split or DEFAULT_SPLIT
        if want not in data_files:
            raise ConfigError("split", want, f"data_files names the splits {sorted(data_files)}; set split: to one")
        return _patterns(data_files[want], None)
    return [str(pattern) for pattern in data_files]  # type: ignore[attr-defined]


def _matched(data_dir: str, patterns: list[str], suffixes: tuple[str, ...], sort: bool) -> list[tuple[str, FileStat]]:
    """The files of `patterns` (relative to `data_dir` unless absolute or a URI), each once."""
    found: dict[str, FileStat] = {}
    for pattern in patterns:
        full = pattern if storage.is_uri(pattern) or os.path.isabs(pattern) else storage.join(data_dir, pattern)
        parts = full.split("/")
        first = next((i for i, part in enumerate(parts) if _GLOB.search(part)), len(parts) - 1)
        folder, rest = "/".join(parts[:first]) or "/", "/".join(parts[first:])
        matcher = re.compile(_translate(rest))
        try:
            walked = _walk(folder, deep="/" in rest or "**" in rest)
        except (FileNotFoundError, NotADirectoryError):
            walked = []
        hits = [(storage.join(folder, rel), stat) for rel, stat in walked if matcher.fullmatch(rel)]
        hits = [(path, stat) for path, stat in hits if path.endswith(suffixes)]
        if not hits:
            raise ConfigError("data_files", pattern, f"matches no {' or '.join(suffixes)} file (under {data_dir})")
        found.update(hits)
    paths = sorted(found) if sort else list(found)
    return [(path, found[path]) for path in paths]


def _walk(folder: str, deep: bool) -> list[tuple[str, FileStat]]:
    """(path relative to `folder`, stat) of its files; of every folder below it when `deep`."""
    if not storage.is_uri(folder):
        if not deep:
            return [(e.name, (e.size, e.mtime_ns)) for e in storage.list_entries(folder) if not os.path.isdir(
                os.path.join(folder, e.name))]  # fmt: skip
        out: list[tuple[str, FileStat]] = []
        for top, dirs, names in os.walk(folder):
            dirs.sort()
            for name in sorted(names):
                stat = os.stat(os.path.join(top, name))
                out.append((os.path.relpath(os.path.join(top, name), folder).replace(os.sep, "/"),
                            (stat.st_size, stat.st_mtime_ns)))  # fmt: skip
        return out
    import pyarrow.fs as pafs

    filesystem, inner = storage.resolve(folder)
    infos = filesystem.get_file_info(pafs.FileSelector(inner, recursive=deep))
    return [
        (info.path[len(inner.rstrip("/")) + 1 :], (int(info.size or 0), info.mtime_ns))
        for info in infos
        if info.type == pafs.FileType.File
    ]


def _translate(pattern: str) -> str:
    """A glob as a regex over `/`-separated paths: `**` spans folders, `*` and `?` do not."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def _some(paths: Sequence[str]) -> str:
    shown = ", ".join(list(paths)[:3])
    return shown + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
