"""The T2I family's WebDataset tars, read in place: which folders hold them, what a unit
reads, and its samples as the cells of BAGEL's T2I rows.

A T2I `data_dir` whose files are `.tar` shards is read as WebDataset (detected, not
declared; img2dataset's `00000.parquet` listing beside `00000.tar` is not data); a folder of
`.parquet` files as before; a dataset whose folders hold both is a `ConfigError` naming
them. A unit is one tar; a sample's address within it is `(block, sample within the
block)` (`sources/tar_index.py`). The member and caption rules are
`prepare t2i`'s (`sources/tar_members.py`), and the cells are the ones its copy stores, so a
tar read in place gives the samples of its prepared copy.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterator, Sequence

from ..errors import ConfigError, RowDropped, SkipLog, SkipReason
from ..sources.captions import numbered_captions
from ..sources.parquet import FileStat, list_parquet_entries, repeated_files
from ..sources.read_ahead import Early, ReadAhead, Task
from ..sources.tar_index import TarIndex, block_counts
from ..sources.tar_members import COMPRESSED_TARS, class_caption, is_tar, refuse_compressed, sample_captions
from .reads import FamilyReads
from .walk import WorkItem

# Salts the fingerprint a tar position is tagged with (`families/positions.py`).
TAR_POSITION_SALT = 0x7A5

# Before a tar is listed the size of its index is unknown: a few dozen bytes per sample.
INDEX_ESTIMATE = 64 << 10
TAR = ".tar"
# Tar indexes a process keeps open (with a handle each for their blocks): the one being
# read and the next ones the read-ahead opened early (`reads.FILES_AHEAD`), with room.
KEPT_INDEXES = 16
# What a T2I folder's listing keeps: tables, tars (`.TAR` too) and compressed tars, which are
# refused by name. Not every entry: a Hub folder's `train/` and `test/` are split folders.
_ARCHIVES = (TAR, *COMPRESSED_TARS)
LISTED_SUFFIXES = (".parquet", *_ARCHIVES, *(suffix.upper() for suffix in _ARCHIVES))


def t2i_shard_files(
    data_dir_list: Sequence[str], num_used_data: Sequence[int], file_order: str
) -> tuple[bool, list[str], dict[str, FileStat]]:
    """(whether the folders hold tars, the units' paths as `num_used_data` repeats them,
    each file's (size, mtime_ns) from the listing), each folder listed once. A `.TAR` is a
    tar; a compressed tar is a `ConfigError` naming it and the fix."""
    listed = {}
    for folder in data_dir_list:
        entries = list_parquet_entries(folder, file_order, LISTED_SUFFIXES)
        kept = _shards([(path, stat) for path, stat in entries if is_tar(path) or path.endswith(".parquet")])
        if not kept or any(is_tar(path) for path, _ in kept):  # a parquet folder may keep an archive beside
            refuse_compressed("data_dir", folder, [path.rsplit("/", 1)[-1] for path, _ in entries])
        listed[folder] = kept
    tars = [path for entries in listed.values() for path, _ in entries if is_tar(path)]
    tables = [path for entries in listed.values() for path, _ in entries if not is_tar(path)]
    if tars and tables:
        raise ConfigError(
            "data_dir",
            list(listed),
            f"holds both .tar shards ({_some(tars)}) and .parquet files ({_some(tables)}); a dataset reads "
            "one kind: move one kind to a folder (a dataset_info entry) of its own",
        )
    kind = ".tar shards" if tars else "*.parquet files"
    paths: list[str] = []
    stats: dict[str, FileStat] = {}
    for folder, num_used in zip(data_dir_list, num_used_data):
        entries = [(path, stat) for path, stat in listed[folder] if is_tar(path) == bool(tars)]
        stats.update(entries)
        paths += repeated_files(folder, [path for path, _ in entries], num_used, kind)
    return bool(tars), paths, stats


def _shards(entries: list[tuple[str, FileStat]]) -> list[tuple[str, FileStat]]:
    """The folder's data files: img2dataset writes `00000.parquet` (the shard's listing of
    urls and statuses) beside `00000.tar`; such a listing is not a table of samples."""
    tars = {path[: -len(TAR)] for path, _ in entries if is_tar(path)}
    return [(path, stat) for path, stat in entries if is_tar(path) or path[: -len(".parquet")] not in tars]


def _some(paths: list[str]) -> str:
    shown = ", ".join(paths[:3])
    return shown + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def check_no_columns(image_column: str | None, caption_column: object) -> None:
    for key, value in (("image_column", image_column), ("caption_column", caption_column)):
        if value is not None:
            raise ConfigError(
                key,
                value,
                "the data_dir holds .tar shards, whose parts are named by extension (.jpg, .txt, .json); "
                "column names are for parquet tables: remove it",
            )


def kept_index(reads: FamilyReads, path: str, listed: FileStat | None = None) -> TarIndex:
    """Tar `path`'s index, opened once per process and kept (its handle reused by the next
    blocks and passes); `listed`: its (size, mtime) from the folder's listing."""
    return reads.kept(("tarindex", path), functools.partial(TarIndex, path, listed), KEPT_INDEXES)


def tar_block_counts(path: str, listed: FileStat | None = None) -> tuple[int, ...] | None:
    """The samples of each block of tar `path`; None when it cannot be listed (a counted
    skip when it is read)."""
    try:
        return block_counts(path, listed)
    except Exception:
        return None


def tar_extent(counts: dict, path: str, row: tuple, listed: FileStat | None = None) -> tuple[str, int, str] | None:
    """How many blocks tar `path` holds (`row` ()), or samples block `row[0]` holds; None
    when the tar cannot be listed (then a counted skip when it is read). `counts` keeps each
    tar's samples per block (not its index: a worker asks about every tar of its group)."""
    if path not in counts:
        counts[path] = tar_block_counts(path, listed)
    found = counts[path]
    if found is None:
        return None
    if not row:
        return "block", len(found), path
    return "sample", found[row[0]], f"{path}, block {row[0]}"


def tar_rows(
    reads: FamilyReads,
    path: str,
    block_start: int,
    row_start: int,
    log: SkipLog,
    single: bool = False,
    class_names: Sequence[str] | None = None,
    listed: FileStat | None = None,
) -> Iterator[tuple[int, int, dict, str]]:
    """(block, sample within it, {"image", "captions"} cells, location `tar:key`) for every
    usable sample of the tar from the start point on (the one at it only, when `single`);
    the others are counted in `log` with the reason `prepare t2i` gives them. `listed`:
    the tar's (size, mtime) from its folder's listing."""
    try:
        opened = functools.partial(kept_index, reads, path, listed)
        index = reads.take(path, opened, kind="tarindex")  # inline: opened once per process
    except Exception as exc:  # a truncated or unreadable tar: prepare's "not a readable tar file"
        log.skip(SkipReason.UNIT_UNREADABLE, path, f"not a readable tar file: {exc}")
        return
    for block in range(block_start, len(index.blocks)):
        span = index.blocks[block]
        first = row_start if block == block_start else 0
        if first < span.stop - span.first:
            try:
                data = reads.take((path, block), functools.partial(index.read_block, block), kind="tarblock")
            except Exception as exc:  # lost bytes lose their block, not the run
                rows = span.stop - span.first - first
                log.skip(SkipReason.UNIT_UNREADABLE, f"{path}, block {block} ({rows} samples)", str(exc), rows=rows)
                data = None
            for row in range(first, span.stop - span.first) if data is not None else ():
                location = f"{path}:{index.key(span.first + row)}"
                cells = _cells(index, span.first + row, block, data, location, log, class_names)
                if cells is not None:
                    yield block, row, cells, location
                if single:
                    return
        if single:
            return


def _cells(
    index: TarIndex, sample: int, block: int, data, location: str, log: SkipLog, class_names=None
) -> dict | None:
    """Sample `sample` as the cells `prepare t2i` writes for it; None when a rule refuses it.
    A class-labelled sample (`.cls`) without a `.txt` / `.json` is captioned by its class's
    name when the group gives `class_names`."""
    problem = index.problem(sample)
    if problem is not None:
        log.skip(problem[0], location, problem[1])
        return None
    image, txt, js, cls = index.parts(sample, block, data)
    if cls is not None and txt is None and js is None and not class_names:
        log.skip(SkipReason.NO_CAPTION, location, "labelled by a .cls only: give the group class_names (a list, "
                 "label 0 first, or a file of one name per line) to caption it by its class's name")  # fmt: skip
        return None
    try:
        named = class_caption(cls, class_names) if txt is None and js is None else None
        captions = named if named is not None else sample_captions(txt, js)[0]
        return {"image": image, "captions": numbered_captions(captions)}
    except RowDropped as bad:
        log.skip(SkipReason(bad.reason), location, bad.detail)
        return None


class TarSource:
    """What a tar unit reads ahead: its index, then its blocks in order. While the plan waits
    on a tar's index, the walk's next tars are listed early (`openings`), as parquet files'
    footers are: a stream of many tars waits on one index round trip, not one per tar."""

    def __init__(self, path_of: Callable[[int], str], index_of: Callable[[str], TarIndex] = TarIndex):
        self.path_of, self.index_of = path_of, index_of
        self._listings: dict[str, Task] = {}  # made ahead by `openings`, taken by `unit_tasks`

    def _listing(self, path: str) -> Task:
        return Task(("tarindex", path), functools.partial(self.index_of, path), INDEX_ESTIMATE)

    def unit_tasks(self, unit_id, row_start, single, files) -> Iterator[Task]:
        path = self.path_of(unit_id)
        listing = self._listings.pop(path, None) or self._listing(path)
        index: TarIndex | None = yield from listing.awaited()
        if index is None:
            return  # the family takes the error and counts the tar as unreadable
        first = row_start[0] if row_start else 0
        stop = min(first + 1, len(index.blocks)) if single else len(index.blocks)
        for block in range(first, stop):
            span = index.blocks[block]
            read = functools.partial(index.read_block, block)
            yield Task(("tarblock", (path, block)), read, span.nbytes)

    def openings(self, items: Sequence[WorkItem], files) -> Iterator[Early]:
        """Hints to list the tars of `items` (the walk's next units) now; a tar whose listing
        was started already is not asked again."""
        for item in items:
            path = self.path_of(item.unit_id)
            listing = self._listings.get(path)
            if listing is None:
                listing = self._listings[path] = self._listing(path)
            if listing.future is None:
                yield Early(listing)

    def pin(self, ahead: ReadAhead, row_keys: list[tuple], files) -> None:
        """Resume: per tar, one task lists it and reads the blocks buffered rows need."""
        by_tar: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for unit_id, _, *row in row_keys:
            by_tar[self.path_of(int(unit_id))][row[0] if row else 0] += 1
        for path, blocks in by_tar.items():
            takes: dict = {("tarindex", path): (_first, sum(blocks.values()))}
            for block, count in blocks.items():
                takes[("tarblock", (path, block))] = (functools.partial(_block, block), count)
            fetch = functools.partial(_fetch, self.index_of, path, sorted(blocks))
            ahead.pin(Task(("tarfile", path), fetch, INDEX_ESTIMATE), takes)


def _fetch(index_of: Callable[[str], TarIndex], path: str, blocks: list[int]) -> tuple:
    try:
        index = index_of(path)
    except Exception as exc:
        return exc, {}
    read: dict[int, object] = {}
    for block in blocks:
        if block < len(index.blocks):
            try:
                read[block] = index.read_block(block)
            except Exception as exc:  # the row's own take raises it, as an inline read would
                read[block] = exc
    return index, read


def _first(value):
    return _raise_or(value[0])


def _block(block: int, value):
    return _raise_or(value[1][block])


def _raise_or(value):
    if isinstance(value, BaseException):
        raise value
    return value
