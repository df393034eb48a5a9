"""Positions from outside checked against the data: does a cursor name a row that exists,
and does a reference position name the row the reference read?

A cursor `(phase, index, *row)` (families/walk.py) comes from a checkpoint, from BAGEL's
`data_status` or from NeMo AutoModel's loader checkpoint. Used unchecked, an index past the
worker's list, a row group the file lacks or a row past its row group's end continues
silently somewhere else. `cursor_problem` says what is wrong with one, down to the row
(the family's unit kind answers how many entries each level of a unit holds: `extent`).
`data_status_cursor` is a worker's `data_status` entry as a cursor, checked both ways.

A reference position names an item of the *reference's* worker list. The default mode's
list is the same only when it takes the same files (`num_used_data` may repeat or pick other
files in sorted order than in the reference's listing order) and shards them the same way
(they divide evenly over ranks x workers); `reference_mismatch` says when it is not, and a
position would then continue on other rows: the caller raises a `ResumeError` instead.
Where the lists may differ, the default mode's own positions carry a fingerprint of the
worker's list as one more entry (`position_tag`), so that a `data_status` of its own run is
told apart from a reference one and resumes exactly. A family whose units the reference
cannot read (T2I's tars) has a unit kind with a `position_salt`: its positions are always tagged, the tag salted
so that a position of other units (the `prepare t2i` copy of the same tars, whose cursors
look alike) never passes for one of its own, and an untagged position is refused.
"""

from __future__ import annotations

import numbers
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..checkpoint.foreign import RESUME_AS_REFERENCE
from ..errors import ResumeError
from ..sharding import INHERITED_PHASE, WorkerShard, phase_work

# `dataset` / `family`: a DistributedIterableDataset (families/base.py), which calls these.
Family = Any


def cursor_problem(dataset: Family, cursor: tuple) -> str | None:
    """Why `cursor` names no row of this worker's walk; None when it names one."""
    if len(cursor) < 2:
        return "a cursor: [phase, index, *row] of ints"
    phase, index, row = cursor[0], cursor[1], tuple(cursor[2:])
    plan = dataset.restart_plan
    if phase < 0 and plan is None:
        return "a restart phase, but the checkpoint has no restart plan"
    shard = dataset.worker_shard()
    if phase == INHERITED_PHASE:
        assert plan is not None  # checked just above
        length = len(plan.inherited_for(*shard.global_worker))
        return f"index {index} is past the {length} item(s) of the worker's work list" if index >= length else None
    work = phase_work(shard, plan, phase)
    if index >= len(work):
        return f"index {index} is past the {len(work)} item(s) of the worker's work list"
    if shard.rows is not None:  # the walk by rows: a cursor is (round, draw index)
        if not row:
            return None
        if len(row) == dataset.units.kind.depth:  # [pass, index, *row]: the walk by whole units'
            return (
                "a cursor of the walk by whole units, saved while this group was walked by whole units (local "
                "tars and parquet on an object store were, before they were walked by rows); this run walks its "
                "rows, [round, draw index], and cannot continue that walk: finish the run with the version that "
                "saved the checkpoint"
            )
        return "a cursor of the walk by rows: [round, draw index]"
    depth = dataset.units.kind.depth
    if depth is not None and len(row) != depth:
        return f"{dataset.dataset_name} cursors have {2 + depth} entries"
    return missing_row(dataset, work.item(index)[0], row)


def missing_row(dataset: Family, unit_id: int, row: tuple) -> str | None:
    """Why `row` is not a row of unit `unit_id`: a level of it past what the unit holds."""
    for level in range(len(row)):
        extent = dataset.units.kind.extent(dataset.units.unit(unit_id), row[:level])
        if extent is None:
            return None  # the family cannot tell (an unreadable file is a counted skip later)
        name, size, where = extent
        if row[level] >= size:
            return (
                f"{dataset.dataset_name}: {name} {row[level]} does not exist: {where} has {size} {name}(s); the "
                "position was recorded on "
                "other data or with another num_used_data, world size or worker count (resume from the "
                "checkpoint of this data, or start this group afresh)"
            )
    return None


def reference_mismatch(dataset: Family) -> str | None:
    """Why a reference position would name another row here than in the reference run
    (None when the worker's list is the reference's, item for item, or in compat mode)."""
    if dataset.policy.reference:
        return None
    listing = dataset.units.kind.listing
    other_files = None if listing is None else listing.reference_mismatch
    if other_files is not None:
        return other_files
    shard = dataset.worker_shard()
    if shard.rows is not None:
        return (
            "the default mode reads every row equally often in shuffled rounds of rows (docs/packing.md), not "
            "the reference's list of whole units"
        )
    theirs = shard.shard(len(dataset.epoch_units), reference=True).unit_ids
    if np.array_equal(shard.unit_ids, theirs):
        return None
    workers = max(shard.num_workers, 1)
    return (
        f"the default sharding gives this worker (rank {shard.rank}, worker {shard.worker_id}) {len(shard.unit_ids)} "
        f"unit(s) where the reference gives {len(theirs)}: {len(dataset.epoch_units)} units do not divide evenly over "
        f"{shard.world_size} rank(s) x {workers} worker(s), and the reference drops the remainder"
    )


def position_tag(dataset: Family, shard: WorkerShard) -> int | None:
    """The tag this worker's positions carry, or None where they are the reference's.

    Where the default mode's worker list may not be the reference's (sharding, or files
    picked by the listing order), a position of ours and one of the reference's can look
    alike and name other rows. Ours then carry one more entry, a fingerprint of the worker's
    list: a `data_status` of either kind is then told apart, and each resumes exactly."""
    if dataset.units.kind.depth is None or (dataset.policy.reference and not _salt(dataset)):
        return None
    if shard.rows is not None:  # never the reference's list: always tagged
        return row_fingerprint(shard, _salt(dataset))
    key = (shard.rank, shard.world_size, shard.worker_id, shard.num_workers, len(dataset.epoch_units))
    held = dataset.__dict__.get("_position_tag")
    if held is None or held[0] != key:
        listing = dataset.units.kind.listing
        same = (
            not _salt(dataset)
            and (listing is None or listing.order_free())
            and np.array_equal(shard.unit_ids, shard.shard(len(dataset.epoch_units), reference=True).unit_ids)
        )
        held = dataset.__dict__["_position_tag"] = (key, None if same else list_fingerprint(dataset, shard))
    return held[1]


def list_fingerprint(dataset: Family, shard: WorkerShard) -> int:
    """A 31-bit fingerprint of a worker's list: its unit ids in the epoch order's count (and
    its unit kind's `position_salt`: units of another kind fingerprint apart)."""
    ids = np.asarray(shard.unit_ids, dtype="<i8").tobytes()
    return zlib.crc32(ids, (len(dataset.epoch_units) ^ _salt(dataset)) & 0xFFFFFFFF) & 0x7FFFFFFF


def _salt(dataset: Family) -> int:
    return int(dataset.units.kind.position_salt)


def row_fingerprint(shard: WorkerShard, salt: int = 0) -> int:
    """A 31-bit fingerprint of a worker's share in the walk by rows: its worker index and
    count, the rows of a pass, the window's sizes and the rounds' offset, and the unit kind's
    `position_salt` where it has one (tars: the `prepare t2i` copy's rows, as many, walk
    alike)."""
    plan = shard.rows
    # The last entry was a constant 1 before windows held several pieces: a position taken
    # under that rule fingerprints as it did, and apart from one taken under today's.
    key = [plan.worker, plan.share.workers, plan.share.total, plan.buffer_size, plan.share.offset, plan.open_pieces]
    key += [salt] if salt else []  # parquet's and JSONL's fingerprints as before
    return zlib.crc32(np.asarray(key, dtype="<i8").tobytes()) & 0x7FFFFFFF


def tagged(dataset: Family, shard: WorkerShard, data_index):
    """A sample's `data_indexes` with this worker's `position_tag`, where it has one."""
    tag = position_tag(dataset, shard)
    if tag is None:
        return data_index
    return [*data_index, tag] if isinstance(data_index, list) else [data_index, tag]


def data_status_cursor(dataset: Family, worker_id: int) -> tuple[int, ...] | None:
    """The `data_status` entry of a worker as a cursor in the first pass, checked: a worker
    id may be a string (a JSON round trip); a position must have the family's length (one
    more entry when it is ours and tagged, `position_tag`), name a row of this worker's list
    and, when it is the reference's, the row the reference read. A ResumeError names what
    is wrong."""
    status: Any = dataset.data_status
    if status is None:
        return None
    if isinstance(status, Mapping):
        found = [status[key] for key in (worker_id, str(worker_id)) if key in status]
    else:
        found = [status[worker_id]] if isinstance(status, (list, tuple)) and worker_id < len(status) else []
    if not found:
        raise ResumeError(
            f"{dataset.dataset_name}: data_status has no entry for worker {worker_id}; give one position "
            "(or null, to start afresh) per DataLoader worker"
        )
    position = found[0]
    if position is None:
        return None
    values = list(position) if isinstance(position, (list, tuple)) else [position]
    shard = dataset.worker_shard()
    if shard.rows is not None:
        return _row_status_cursor(dataset, shard, worker_id, position, values)
    depth = dataset.units.kind.depth
    what = f"data_status[{worker_id}] = {str(position)[:80]}"
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) >= 0 for v in values) or (
        depth is not None and len(values) not in (1 + depth, 2 + depth)
    ):
        raise ResumeError(
            f"{dataset.dataset_name}: {what} is not a position of this worker: "
            f"{1 + depth if depth is not None else 'some'} non-negative int(s) (and this library's tag)"
        )
    ours = depth is not None and len(values) == 2 + depth  # tagged: read from the list it fingerprints
    if ours and int(values[-1]) != list_fingerprint(dataset, shard):
        raise ResumeError(
            f"{dataset.dataset_name}: {what} was recorded on another file list (its last entry fingerprints "
            "the worker's files): resume with the same data, num_used_data, data_seed, world size and workers"
        )
    cursor = (0, *(int(v) for v in values[: len(values) - ours]))
    if cursor[1] >= len(shard.unit_ids):
        raise ResumeError(
            f"{dataset.dataset_name}: {what} is not a position of this worker: its first entry must be under its "
            f"{len(shard.unit_ids)} unit(s)"
        )
    if not ours and _salt(dataset):
        raise ResumeError(
            f"{dataset.dataset_name}: {what} is untagged: a position of parquet rows (BAGEL's reader, or the "
            "`prepare t2i` copy of these tars), not of the tars this group reads, whose positions end with this "
            "library's tag. Resume with the data_status of a run on these tars, or start the group afresh"
        )
    if not ours and position_tag(dataset, shard) is not None:
        check_reference_position(dataset, what)  # untagged here: the reference's position
    problem = cursor_problem(dataset, cursor)
    if problem is not None:
        raise ResumeError(f"{what}: {problem}")
    return cursor


def check_reference_position(dataset: Family, what: str) -> None:
    """A ResumeError when `what` (a reference position) would continue on other rows here."""
    mismatch = reference_mismatch(dataset)
    if mismatch is not None:
        raise ResumeError(
            f"{dataset.dataset_name}: {what} is a position of the reference's file list, which is not this run's: "
            f"{mismatch}. It would continue on other rows; {RESUME_AS_REFERENCE}"
        )


def _row_status_cursor(dataset: Family, shard: WorkerShard, worker_id: int, position, values):
    """`data_status_cursor` in the walk by rows: only this library's own positions `[round,
    draw index, fingerprint]` (a sample's `data_indexes`) resume; the reference's name a unit
    of a list this mode does not walk."""
    what = f"data_status[{worker_id}] = {str(position)[:80]}"
    ints = all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values)
    if (
        len(values) != 3
        or not ints
        or values[2] != row_fingerprint(shard, _salt(dataset))
        or not values[0] >= INHERITED_PHASE
    ):
        raise ResumeError(
            f"{dataset.dataset_name}: {what} is not a position of this worker's walk by rows, [round, draw, "
            "fingerprint] (the default mode reads every row equally often, in shuffled rounds, not the "
            f"reference's unit list); {RESUME_AS_REFERENCE}"
        )
    cursor = (int(values[0]), int(values[1]))
    problem = cursor_problem(dataset, cursor)
    if problem is not None:
        raise ResumeError(f"{what}: {problem}")
    return cursor
