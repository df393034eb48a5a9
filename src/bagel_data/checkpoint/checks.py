"""A checkpoint and a `data_status` are checked, not trusted.

Both come from outside the process (a file a person can edit, a JSON round trip, another
version of the library). A malformed one used as it is reads rows twice or never, or fails
deep in a worker with a bare `KeyError`. So every field is checked before use: types, the
topology, each cursor's length and range in its worker's work list, the buffer's size and
uniqueness; a failure is a `ResumeError` that names the field.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..errors import ResumeError, shown
from ..sharding import INHERITED_PHASE

_INT_FIELDS = ("packs", "tokens", "data_seed")
_MAPPING_FIELDS = ("topology", "units", "rng", "samples", "skips", "stages")
_TOPOLOGY_KEYS = ("rank", "world_size", "worker_id", "num_workers")
CURSORS = "stages.draw.cursors"  # where a checkpoint keeps the groups' cursors (`state.DRAW`)
# The fields older versions kept at the top, and where this version keeps them (`state.upgrade`
# moves them): one still at the top would be ignored, so it is refused.
_STAGE_FIELDS = {
    "cursors": CURSORS,
    "buffer": "stages.overflow.buffer",
    "carry": "stages.overflow.carry",
    "group_tokens": "stages.choose.group_tokens",
    "backlog": "stages.pace.backlog",
    "packed_tokens": "stages.pace.packed_tokens",
}


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _bad(field: str, value: Any, want: str) -> ResumeError:
    return ResumeError(f"checkpoint field {field} = {shown(value, 80)}: {want}")


def check_shape(saved: Any, group_names: list[str]) -> None:
    """The worker's own fields have the types `PackState.restore` reads (before any use);
    each stage checks its own part (`stages.<key>`) as it loads it (`check_cursors`,
    `check_waiting` for the draw path's and the overflow's)."""
    if not isinstance(saved, Mapping):
        raise _bad("(root)", saved, "a checkpoint is a dict (PackedDataset.state_dict())")
    for key, home in _STAGE_FIELDS.items():
        if key in saved:  # an older version's field, written into this version's form by hand
            raise _bad(key, saved[key], f"this checkpoint version keeps it under {home}; move it there")
    for key in (*_INT_FIELDS, *_MAPPING_FIELDS):
        if key not in saved:
            raise ResumeError(f"checkpoint field {key} is missing: this is not a whole PackedDataset checkpoint")
    for key in _INT_FIELDS:
        if not _is_int(saved[key]) or (key != "data_seed" and saved[key] < 0):
            raise _bad(key, saved[key], "a non-negative int")
    for key in _MAPPING_FIELDS:
        if not isinstance(saved[key], Mapping):
            raise _bad(key, saved[key], "a mapping")
    topology = saved["topology"]
    if sorted(topology) != sorted(_TOPOLOGY_KEYS) or not all(_is_int(v) and v >= 0 for v in topology.values()):
        raise _bad("topology", topology, f"a mapping of {_TOPOLOGY_KEYS} to non-negative ints")
    for name, counts in saved["skips"].items():
        if not isinstance(counts, Mapping) or not all(_is_int(v) and v >= 0 for v in counts.values()):
            raise _bad(f"skips.{name}", counts, "a mapping of reasons to non-negative counts")
    values = saved["samples"]
    if not all(_is_int(v) and v >= 0 for v in values.values()):
        raise _bad("samples", values, "a mapping of groups to non-negative ints")
    if not all(isinstance(part, Mapping) for part in saved["stages"].values()):
        raise _bad("stages", saved["stages"], "a mapping of stage names to mappings")
    for key in ("restart", "history", "inputs"):
        if saved.get(key) is not None and not isinstance(saved[key], Mapping):
            raise _bad(key, saved[key], "null or a mapping")
    check_totals(saved, group_names)


def check_cursors(field: str, cursors: Any, group_names: list[str]) -> None:
    """A saved `{group: cursor or None}` (`field`: where it is) names each group of this
    pipeline, and only those, with a well-formed cursor."""
    if cursors is None:
        raise ResumeError(f"checkpoint field {field} is missing: this is not a whole PackedDataset checkpoint")
    if not isinstance(cursors, Mapping):
        raise _bad(field, cursors, "a mapping of groups to cursors")
    unknown = sorted(set(cursors) - set(group_names))
    if unknown:
        raise _bad(field, unknown, f"unknown group(s); this pipeline has {group_names}")
    missing = [name for name in group_names if name not in cursors]
    if missing:
        raise _bad(field, sorted(cursors), f"a cursor (or null) for every group; {missing} missing")
    for name in group_names:
        _check_cursor(f"{field}.{name}", cursors[name], allow_none=True)


def check_waiting(field: str, buffer: Any, carry: Any, group_names: list[str]) -> None:
    """The saved buffer (a list of entries) and carry (one entry or null) under `field`:
    each a known group's well-formed entry, no row twice."""
    if buffer is None:
        raise ResumeError(f"checkpoint field {field}.buffer is missing: this is not a whole PackedDataset checkpoint")
    if not isinstance(buffer, list):
        raise _bad(f"{field}.buffer", buffer, "a list of [group, cursor] entries")
    seen: set[tuple] = set()
    for index, entry in enumerate(buffer):
        row = _entry(f"{field}.buffer[{index}]", entry, group_names)
        if row in seen:
            raise _bad(f"{field}.buffer[{index}]", entry, "the same row twice in the buffer (it would be packed twice)")
        seen.add(row)
    if carry is not None:
        _check_one_carry(f"{field}.carry", carry)
        if _entry(f"{field}.carry", carry, group_names) in seen:
            raise _bad(f"{field}.carry", carry, "the carried row is also in the buffer")


def check_totals(saved: Mapping, group_names: list[str]) -> None:
    """The counters agree with each other (each was checked alone before): every pack and
    every packed sample holds at least one token. (A stage checks its own counters against
    these as it loads them: the pacer's phase tokens, `packing/pacing.PaceState`.)"""
    tokens, packs = saved["tokens"], saved["packs"]
    if packs > tokens:
        raise _bad("packs", packs, f"at most the checkpoint's tokens ({tokens}): every pack holds a token")
    samples = sum(saved["samples"].values())
    if samples > tokens:
        raise _bad("samples", f"{samples} in all", f"at most the checkpoint's tokens ({tokens})")


_ENTRY_KEYS = {"v", "group", "cursor", "rng_state", "waited"}


def _entry(field: str, entry: Any, group_names: list[str]) -> tuple:
    """A buffer or carry entry: a `BufferEntry` dict (version 1), or version 2's list."""
    if isinstance(entry, Mapping):
        if entry.get("v") != 1 or not {"v", "group", "cursor"} <= set(entry) <= _ENTRY_KEYS:
            raise _bad(
                field, entry, f"a buffer entry {{v: 1, group, cursor, rng_state, waited}} (keys {sorted(entry)})"
            )
        entry = [entry["group"], entry["cursor"], entry.get("rng_state"), entry.get("waited", 0)]
    if not isinstance(entry, (list, tuple)) or len(entry) not in (2, 3, 4):
        raise _bad(field, entry, "[group, cursor] (and the compat stream state, and packs waited)")
    if len(entry) == 4 and not (_is_int(entry[3]) and entry[3] >= 0):
        raise _bad(field, entry[3], "packs waited: a non-negative int")
    if len(entry) >= 3 and entry[2] is not None and not isinstance(entry[2], Mapping):
        raise _bad(field, entry[2], "the compat stream state: null or a mapping")
    if entry[0] not in group_names:
        raise _bad(field, entry[0], f"an unknown group; this pipeline has {group_names}")
    _check_cursor(field, entry[1], allow_none=False)
    return entry[0], tuple(entry[1])


def _check_cursor(field: str, cursor: Any, allow_none: bool) -> None:
    if cursor is None and allow_none:
        return
    if not isinstance(cursor, (list, tuple)) or not cursor or not all(_is_int(v) for v in cursor):
        raise _bad(field, cursor, "a cursor: [phase, index, *row] of ints")
    if cursor[0] < INHERITED_PHASE or any(value < 0 for value in cursor[1:]):
        raise _bad(field, cursor, f"phase >= {INHERITED_PHASE} and a non-negative index and row ({_negative(cursor)})")


def _cursor_part(position: int, length: int) -> str:
    """What entry `position` of a cursor of `length` entries is: `[phase, unit, row]` for
    a unit of lines, `[phase, unit, row group, row]` for a parquet unit."""
    if position == 0:
        return "the phase"
    if position == 1:
        return "the unit (index in the worker's work list)"
    if position == length - 1:
        return "the row"
    return "the row group" if position == length - 2 else f"entry {position}"


def _negative(cursor: Any) -> str:
    """The first out-of-range entry of a cursor, by name: a hand edit is found at once."""
    position = next(i for i, value in enumerate(cursor) if value < (INHERITED_PHASE if i == 0 else 0))
    return f"{_cursor_part(position, len(cursor))} is {cursor[position]}"


def _check_one_carry(field: str, carry: Any) -> None:
    """The carry is one entry, the sample that opens the next pack: a list of entries in its
    place (a row carried twice, or several rows) is refused as such, not as an unknown group."""
    if isinstance(carry, (list, tuple)) and carry and all(isinstance(item, (list, tuple, Mapping)) for item in carry):
        raise _bad(field, carry, "one [group, cursor] entry, not a list of entries (one sample is carried)")


class CursorCheck(Protocol):
    """What a group answers about a cursor (`packing/groups.GroupSource` is one)."""

    def cursor_problem(self, cursor: tuple) -> str | None: ...


def check_cursor_ranges(groups: Sequence[CursorCheck], group_names: list[str], cursors: list, buffered: list) -> None:
    """Each cursor names a row of its worker's walk: in its work list, of the group's length,
    and within its unit, row group and row (after the restart plan is applied, so that the
    phases are known); the group says what is wrong (`families/positions.py`)."""
    places = [(f"{CURSORS}.{name}", index, cursor) for index, (name, cursor) in enumerate(zip(group_names, cursors))]
    places += [(field, group, cursor) for field, group, cursor in buffered]
    for field, group, cursor in places:
        if cursor is None:
            continue
        problem = groups[group].cursor_problem(tuple(cursor))
        if problem is not None:
            raise _bad(field, list(cursor), problem)


def check_waiting_drawn(group_names: list[str], cursors: list, waiting: list) -> None:
    """Each buffered or carried row was drawn: at or before its group's cursor (the last row
    drawn), never after it, where the stream would draw it again and pack it twice."""
    for field, group, cursor in waiting:
        drawn_to = cursors[group]
        if drawn_to is None or tuple(cursor) > tuple(drawn_to):
            raise _bad(
                field,
                list(cursor),
                f"a row after {CURSORS}.{group_names[group]} = {shown(drawn_to and list(drawn_to))}: it would be "
                "drawn again and packed twice (was the cursor moved back?); resume from an unedited checkpoint",
            )


def check_data_status(status: Any, group_names: list[str]) -> dict | None:
    """This rank's `data_status` as `{group: {worker id: position}}`, worker ids as ints
    (a JSON round trip makes them strings); a ResumeError names an unknown group or a
    malformed entry."""
    if status is None:
        return None
    if not isinstance(status, Mapping):
        raise ResumeError(f"data_status = {shown(status, 80)}: a mapping of group names to per-worker positions")
    unknown = sorted(set(status) - set(group_names))
    if unknown:
        raise ResumeError(f"data_status names unknown group(s) {shown(unknown, 120)}; the groups are {group_names}")
    checked: dict = {}
    for group, workers in status.items():
        if workers is None:
            checked[group] = None
            continue
        if isinstance(workers, (list, tuple)):  # indexed by worker id
            workers = dict(enumerate(workers))
        if not isinstance(workers, Mapping):
            raise ResumeError(f"data_status.{group} = {shown(workers, 80)}: a mapping of worker ids to positions")
        entries = {}
        for worker, position in workers.items():
            try:
                worker_id = int(worker)
            except (TypeError, ValueError):
                raise ResumeError(f"data_status.{group}: worker id {shown(worker, 40)} is not an int") from None
            if worker_id < 0:
                raise ResumeError(f"data_status.{group}: worker id {worker_id} is negative")
            entries[worker_id] = _position(f"data_status.{group}[{worker_id}]", position)
        checked[group] = entries
    return checked


def _position(field: str, position: Any):
    values = list(position) if isinstance(position, (list, tuple)) else [position]
    if position is not None and (not values or not all(_is_int(v) and v >= 0 for v in values)):
        raise ResumeError(f"{field} = {shown(position, 80)}: a position of non-negative ints")
    return position
