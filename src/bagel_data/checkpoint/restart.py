"""Elastic restart: continue the checkpoints of W ranks x K workers on W' ranks x K' workers.

An exact resume needs the same topology, because a worker's cursor is a position in *its*
share of the units. To change the topology, the checkpoints of all old workers are merged
into one restart plan per group (`checkpoint/merge.py`, called by
`PackedDataset.load_elastic_state`). Every new worker then reads, in order:

1. **inherited** (`INHERITED_PHASE`): its round-robin share of the samples the old workers
   held in their overflow buffers or carried to their next pack. They are drawn again
   like any other sample, so none is lost and none packed twice.
2. **remainder** (`REMAINDER_PHASE`): its contiguous share of the rows the old workers had
   not yet reached in their pass in progress (the rest of a partly read unit, then whole
   units), each row read with the randomness of its old pass.
3. **full passes** over its new share of the units, numbered from one past the highest pass
   any old worker had begun, so no new pass repeats an old pass's random choices.

Guarantee, per group: every row an old worker had not yet drawn in its pass in progress is
drawn exactly once in phase 2, and every buffered or carried sample exactly once in phase 1;
each new worker reads its whole share of both before its own phase 3, so rows already drawn
are not drawn again until then. Workers run independently, as in any run: a worker that
finishes its (equal-sized) share early may start phase 3 while another is still in phase 2.
The packer's generator starts afresh (per new rank and worker, and per restart), counters
restart at zero and the old totals are kept under `history`. A plan is a few hundred bytes
per old worker, and checkpoints taken after the restart carry it, so they resume exactly
and can themselves be merged for the next restart.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses

from ..errors import ResumeError
from ..sharding import (
    INHERITED_PHASE,
    WorkerShard,
    WorkerTopology,
    row_key_at,
    split_evenly,
)
from .state import saved_cursor, saved_waiting


@dataclasses.dataclass(frozen=True)
class Segment:
    """`count` units `first, first + step, ...` read in pass `pass_index`; the first one
    from row `start` (a row within the unit; `()` means the whole unit)."""

    first: int
    count: int
    step: int
    pass_index: int
    start: tuple = ()


class RemainderWork:
    """Items `[lo, hi)` of the concatenated segments: one new worker's remainder share."""

    def __init__(self, segments: tuple[Segment, ...], lo: int, hi: int):
        self.segments, self.lo, self.hi = segments, lo, hi
        self.offsets = [0]
        for segment in segments:
            self.offsets.append(self.offsets[-1] + segment.count)

    def __len__(self) -> int:
        return self.hi - self.lo

    def item(self, index: int) -> tuple[int, int, tuple]:
        """(global unit id, pass whose randomness it uses, first row within the unit)."""
        overall = self.lo + index
        which = bisect.bisect_right(self.offsets, overall) - 1
        segment, k = self.segments[which], overall - self.offsets[which]
        return segment.first + k * segment.step, segment.pass_index, segment.start if k == 0 else ()

    def segments_from(self, index: int, row_start: tuple = ()) -> list[Segment]:
        """What is left from item `index` on, as segments; the first item from row
        `row_start`, or from its own start when that is `()`."""
        left: list[Segment] = []
        overall = self.lo + index
        while overall < self.hi:
            which = bisect.bisect_right(self.offsets, overall) - 1
            segment, k = self.segments[which], overall - self.offsets[which]
            count = min(self.offsets[which + 1], self.hi) - overall
            start = (row_start if not left else ()) or (segment.start if k == 0 else ())
            left.append(Segment(segment.first + k * segment.step, count, segment.step, segment.pass_index, start))
            overall += count
        return left


@dataclasses.dataclass(frozen=True)
class GroupRestart:
    """One group's restart plan: what every new worker reads before its full passes."""

    first_pass: int
    segments: tuple[Segment, ...]
    inherited: tuple[tuple[int, ...], ...]
    # The default mode's walk by rows (families/row_plan.py): the old run's leftover as pieces
    # `(block, pass, first row, rows)`, and the stream position the new rounds start at.
    pieces: tuple[tuple[int, ...], ...] = ()
    row_offset: int = 0

    def remainder_for(self, worker: int, total: int) -> RemainderWork:
        size = sum(segment.count for segment in self.segments)
        span = split_evenly(size, total, worker)
        return RemainderWork(self.segments, span.start, span.stop)

    def inherited_for(self, worker: int, total: int) -> list[tuple[int, ...]]:
        return list(self.inherited[worker::total])

    def to_dict(self) -> dict:
        return {
            "first_pass": self.first_pass,
            "segments": [[s.first, s.count, s.step, s.pass_index, list(s.start)] for s in self.segments],
            "inherited": [list(key) for key in self.inherited],
            # Only a plan of the walk by rows has these; other plans keep their old form.
            **({"pieces": [list(p) for p in self.pieces], "row_offset": self.row_offset} if self.row_offset else {}),
        }

    @classmethod
    def from_dict(cls, saved: dict) -> GroupRestart:
        segments = tuple(Segment(a, b, c, d, tuple(e)) for a, b, c, d, e in saved["segments"])
        inherited = tuple(tuple(key) for key in saved["inherited"])
        pieces = tuple(tuple(int(v) for v in piece) for piece in saved.get("pieces", ()))
        return cls(saved["first_pass"], segments, inherited, pieces, int(saved.get("row_offset", 0)))


def _after(row: list[int]) -> tuple:
    return () if not row else (*row[:-1], row[-1] + 1)


def _pass_segments(unit_ids, from_index: int, pass_index: int, row_start: tuple) -> list[Segment]:
    """The rest of a full pass over a worker's `unit_ids` (consecutive ids, up or down, as
    `shard_unit_ids` makes them) from item `from_index`, as segments."""
    count = len(unit_ids) - from_index
    if count <= 0:
        return []
    first = int(unit_ids[from_index])
    step = -1 if count > 1 and int(unit_ids[from_index + 1]) < first else 1
    if not row_start:
        return [Segment(first, count, step, pass_index)]
    head = [Segment(first, 1, step, pass_index, row_start)]
    return head + ([Segment(first + step, count - 1, step, pass_index)] if count > 1 else [])


def worker_leftover(shard: WorkerShard, plan: GroupRestart | None, cursor) -> tuple[list, list, int]:
    """(segments, inherited row keys, next full pass) an old worker had not yet drawn."""
    worker = shard.global_worker
    first_pass = plan.first_pass if plan is not None else 0
    inherited = plan.inherited_for(*worker) if plan is not None else []
    remainder = plan.remainder_for(*worker) if plan is not None else None
    if cursor is None:  # nothing drawn yet: everything before the first full pass is left
        if remainder is None:
            return _pass_segments(shard.unit_ids, 0, 0, ()), [], 1
        return remainder.segments_from(0), inherited, first_pass
    phase, index, *row = cursor
    if phase >= 0:  # in a full pass
        if row:
            return _pass_segments(shard.unit_ids, index, phase, _after(row)), [], phase + 1
        return _pass_segments(shard.unit_ids, index + 1, phase, ()), [], phase + 1
    assert remainder is not None, "the phases before the first full pass exist only under a restart plan"
    if phase == INHERITED_PHASE:
        return remainder.segments_from(0), inherited[index + 1 :], first_pass
    # REMAINDER_PHASE: within the old workers' remainder
    if row:
        return remainder.segments_from(index, _after(row)), [], first_pass
    return remainder.segments_from(index + 1), [], first_pass


def check_complete(topologies: list[dict]) -> tuple[int, int]:
    """(world size, workers per rank) of a complete set of old worker checkpoints."""
    shapes = {(t["world_size"], t["num_workers"]) for t in topologies}
    if len(shapes) != 1:
        raise ResumeError(f"checkpoints come from different topologies: {sorted(shapes)}")
    world_size, num_workers = shapes.pop()
    have = collections.Counter((t["rank"], t["worker_id"]) for t in topologies)
    want = {(rank, worker) for rank in range(world_size) for worker in range(max(num_workers, 1))}
    missing, doubled = sorted(want - set(have)), sorted(key for key, n in have.items() if n > 1)
    if missing or doubled or set(have) != want:
        raise ResumeError(
            f"an elastic restart needs the checkpoint of every worker of every rank exactly once "
            f"(world size {world_size}, {num_workers} worker(s) per rank); missing (rank, worker) "
            f"{missing}, given twice {doubled}"
        )
    return world_size, num_workers


def group_plan(dataset, group: str, states: list[dict], old_plans: list[GroupRestart | None]) -> GroupRestart:
    """Merge one group's leftovers of all old workers (in rank, worker order)."""
    if dataset.units.row_layout() is not None:
        return row_group_plan(dataset, group, states, old_plans)
    num_units = len(dataset.epoch_units)
    segments, inherited, first_pass = [], [], 0
    for state, plan in zip(states, old_plans):
        shard = WorkerTopology(**state["topology"]).shard(num_units)
        cursor = saved_cursor(state, group)
        left, left_inherited, next_pass = worker_leftover(shard, plan, None if cursor is None else tuple(cursor))
        held_keys = [row_key_at(shard, plan, entry.cursor) for entry in saved_waiting(state) if entry.group == group]
        segments += left
        inherited += list(left_inherited) + held_keys
        first_pass = max(first_pass, next_pass)
    return GroupRestart(first_pass, tuple(segments), tuple(tuple(key) for key in inherited))


def _held_keys(shard: WorkerShard, plan: GroupRestart | None, state: dict, group: str) -> list[tuple]:
    return [tuple(row_key_at(shard, plan, entry.cursor)) for entry in saved_waiting(state) if entry.group == group]


def row_group_plan(dataset, group: str, states: list[dict], old_plans: list[GroupRestart | None]) -> GroupRestart:
    """`group_plan` for the default mode's walk by rows. An old worker's leftover is what
    its round in progress has not drawn (rows of its open pieces, then whole pieces), its
    whole chunks of any rounds before the furthest one an old worker began, and, under an
    old plan, what it had not drawn of that plan; new rounds start past the furthest old
    round, so no stream position is drawn twice or left out."""
    entries, furthest, end = [], -1, 0
    for state, plan in zip(states, old_plans):
        offset = plan.row_offset if plan is not None else 0
        shard = dataset.units.shard_of(WorkerTopology(**state["topology"]), offset=offset)
        cursor = saved_cursor(state, group)
        round_index = cursor[0] if cursor is not None and cursor[0] >= 0 else -1
        entries.append((state, plan, shard, None if cursor is None else tuple(cursor), round_index))
        furthest = max(furthest, round_index)
        end = max(end, shard.rows.share.round_end(round_index) if round_index >= 0 else offset)
    pieces: list[list[int]] = []
    inherited: list[tuple] = []
    for state, plan, shard, cursor, round_index in entries:
        rows, worker = shard.rows, shard.global_worker
        if plan is not None and round_index < 0:  # still before its plan's rounds
            phase, index = (cursor[0], cursor[1]) if cursor is not None else (INHERITED_PHASE, -1)
            if phase == INHERITED_PHASE:
                inherited += [tuple(key) for key in plan.inherited_for(*worker)[index + 1 :]]
                index = -1
            pieces += rows.leftover(rows.remainder(plan.pieces, *worker), index + 1)
        if round_index >= 0:
            assert cursor is not None  # a round begun has a cursor in it
            pieces += rows.leftover(rows.round(round_index), cursor[1] + 1)
        for later in range(round_index + 1, furthest + 1):
            pieces += rows.chunk(worker[0], later)
        inherited += _held_keys(shard, plan, state, group)
    return GroupRestart(0, (), tuple(inherited), tuple(tuple(p) for p in pieces), end)
