"""The resumable state of a packing worker, and its checkpoint form.

A checkpoint holds *where* things are, never the tensors: each group's cursor (the last
sample drawn), the packer's generator state, the overflow buffer and the carried sample as
the cursors of their samples (rebuilt on restore by re-reading those rows with the same
per-sample randomness), and the counters. Its size does not depend on image sizes.

The worker's own fields (its identity, generator, totals and restart plan) are at the top;
each packing stage saves and loads its own state under its key of `stages`, as torchdata's
nodes nest theirs (`Stage`): the draw path's cursors (`draw`), the overflow's buffer and
carry (`overflow`), the group choice's counts (`choose`), the pacer's backlog (`pace`).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, cast

from ..compat.streams import RandomSource
from ..errors import ResumeError, SkipLog, shown
from ..sample import Draw
from ..sharding import WorkerTopology
from .inputs import check_inputs
from .tokens import check_tokenizer

# 2: in-process topology has num_workers=0; elastic-restart plans (restart.py).
# 3: buffer and carry entries are `BufferEntry` dicts; version 2 checkpoints still load.
# 4: `backlog` and `packed_tokens` (a schedule's change point, packing/pacing.py); older
#    checkpoints load with no backlog.
# 5: each stage's own state nested under `stages.<key>` (`Stage`): the group choice's
#    `group_tokens` under `choose`, the pacer's `backlog` and `packed_tokens` under `pace`;
#    `upgrade` moves an older checkpoint's fields there.
# 6: the draw path's `cursors` under `stages.draw`, the overflow's `buffer` and `carry`
#    under `stages.overflow`.
STATE_VERSION = 6
READABLE_VERSIONS = (2, 3, 4, 5, 6)
# The stages' keys in a worker's checkpoint (`stages.<key>`).
DRAW, OVERFLOW, CHOOSE, PACE = "draw", "overflow", "choose", "pace"
# Top-level fields of older versions that a stage owns now: field -> (stage, name, the
# version that moved it).
_MOVED = {
    "group_tokens": (CHOOSE, "group_tokens", 5),
    "backlog": (PACE, "backlog", 5),
    "packed_tokens": (PACE, "packed_tokens", 5),
    "cursors": (DRAW, "cursors", 6),
    "buffer": (OVERFLOW, "buffer", 6),
    "carry": (OVERFLOW, "carry", 6),
}
ENTRY_VERSION = 1


def check_compatible(
    saved: dict,
    data_seed: int,
    group_names: list[str],
    units: list[int],
    inputs: list[dict | None] | None = None,
    tokenizer: dict | None = None,
) -> None:
    """Raise ResumeError unless `saved` was made by this library for the same data, groups
    and tokenizer (`units`: how many units each group has now; `inputs`: each group's
    `input_record`; `tokenizer`: this pipeline's fingerprint, `checkpoint/tokens.py`)."""
    if saved.get("version") not in READABLE_VERSIONS:
        raise ResumeError(
            f"checkpoint format version {saved.get('version')!r} is not this library's ({STATE_VERSION}; NeMo "
            "AutoModel's PackedDataset checkpoints also load). To continue the run anyway, rebuild the dataset "
            "with data_status={group: {worker_id: data_indexes}} from the batch_data_indexes the run consumed "
            "(see docs/coming_from.md) and do not load this checkpoint"
        )
    if saved["data_seed"] != data_seed:
        raise ResumeError(f"checkpoint data_seed={saved['data_seed']}, this pipeline's is {data_seed}")
    saved_groups = sorted(saved["units"])
    if saved_groups != sorted(group_names):
        raise ResumeError(f"checkpoint groups {saved_groups} differ from {sorted(group_names)}")
    for name, count in zip(group_names, units):
        if saved["units"][name] != count:
            raise ResumeError(
                f"{name}: the checkpoint was taken with {saved['units'][name]} units, the dataset now has {count}; "
                "resume with the same data, num_used_data and data_seed"
            )
    for name, record in zip(group_names, inputs or ()):
        check_inputs(name, (saved.get("inputs") or {}).get(name), record)
    check_tokenizer(saved.get("tokenizer"), tokenizer)


@dataclasses.dataclass(frozen=True)
class BufferEntry:
    """A buffered or carried sample as a checkpoint holds it: by reference.

    Saved as a dict with its own `v` (`ENTRY_VERSION`). Version-2 checkpoints wrote
    positional lists, `[group, cursor]` with an optional compat stream state and packs
    waited; `read` takes both."""

    group: str
    cursor: tuple
    rng_state: dict | None = None  # compat="bagel": the shared stream before the sample's row
    waited: int = 0  # best-fit: packs it waited beside mandatory samples (resume stays exact)

    def to_saved(self) -> dict:
        return {
            "v": ENTRY_VERSION,
            "group": self.group,
            "cursor": plain_cursor(self.cursor),
            "rng_state": self.rng_state,
            "waited": self.waited,
        }

    @classmethod
    def read(cls, raw) -> BufferEntry:
        """An entry from its saved dict or a version-2 positional list (`checks.py` checked
        its shape first)."""
        if isinstance(raw, Mapping):
            return cls(raw["group"], tuple_cursor(raw["cursor"]), raw.get("rng_state"), int(raw.get("waited", 0)))
        rng_state = raw[2] if len(raw) > 2 else None
        return cls(raw[0], tuple_cursor(raw[1]), rng_state, int(raw[3]) if len(raw) > 3 else 0)

    @classmethod
    def of(cls, draw: Draw, group_names: list[str]) -> BufferEntry:
        return cls(group_names[draw.group], draw.cursor, draw.rng_state, draw.waited)

    def draw(self, group_names: list[str]) -> Draw:
        """The draw to rebuild from this entry (its sample is read again on resume)."""
        return Draw(group_names.index(self.group), self.cursor, None, self.rng_state, waited=self.waited)


class Stage(Protocol):
    """A packing stage's own state, nested under its key in the worker's checkpoint (as
    torchdata's nodes nest theirs): what it saves, and loading it back, checked against
    the rest of the checkpoint (`worker`: the whole saved dict, read-only)."""

    def state_dict(self) -> dict: ...
    def load_state_dict(self, saved: Mapping, worker: Mapping) -> None: ...


class DrawStage(Stage, Protocol):
    """The draw path's state (`packing/groups.DrawState`): each group's cursor, the last
    row drawn (None: nothing drawn yet), in group order."""

    cursors: list[tuple | None]


class OverflowStage(Stage, Protocol):
    """The overflow's state (`packing/overflow.OverflowState`): the buffered samples,
    oldest first, and the sample carried into the next pack."""

    buffer: collections.deque[Draw]
    carry: Draw | None


def upgrade(saved: Mapping) -> dict:
    """A checkpoint of an older version in this version's layout (this version's as it
    is): the fields a stage owns now move under `stages` (absent ones stay absent: the
    stage's defaults, e.g. no backlog)."""
    saved = dict(saved)
    if saved.get("version") not in READABLE_VERSIONS or saved["version"] >= STATE_VERSION:
        return saved
    stages = {key: dict(part) for key, part in (saved.get("stages") or {}).items()}
    for field, (stage, name, version) in _MOVED.items():
        if field in saved and saved["version"] < version:
            stages.setdefault(stage, {})[name] = saved.pop(field)
    saved["stages"], saved["version"] = stages, STATE_VERSION
    return saved


def saved_cursor(saved: Mapping, group: str):
    """A group's cursor in a checkpoint of this version (as saved: a list, or None)."""
    return saved["stages"][DRAW]["cursors"][group]


def saved_waiting(saved: Mapping) -> list[BufferEntry]:
    """The samples a checkpoint of this version holds outside a pack: the carry, then the
    buffer, oldest first."""
    part = saved["stages"][OVERFLOW]
    carry = [part["carry"]] if part.get("carry") else []
    return [BufferEntry.read(raw) for raw in [*carry, *part["buffer"]]]


@dataclasses.dataclass
class PackState:
    """Everything a packing worker needs to continue exactly where it stopped: its own
    fields, and each stage's state by its key (`stages`)."""

    topology: WorkerTopology
    data_seed: int
    units: list[int]  # units per group: a checkpoint only fits the same data
    rng: RandomSource  # the packer's: SeededRandom, or compat="bagel"'s shared CompatRandom
    logs: list[SkipLog]
    # The packing stages' own states by key: the draw path's and the overflow's first (the
    # others check theirs against them), then the group choice's and the pacer's; each saves
    # and loads itself (`Stage`); the packer makes them (`StreamSetup.new_stages`).
    stages: dict[str, Stage]
    restart: dict | None = None  # the elastic-restart plan this stream runs under (restart.py)
    history: dict | None = None  # totals of the topology before the last elastic restart
    inputs: list[dict | None] | None = None  # each group's input files and sizes (inputs.py)
    tokenizer: dict | None = None  # the tokenizer's fingerprint (tokens.py)
    orders: dict | None = None  # each group's row order sizes, by name (orders.py)
    packs: int = 0
    tokens: int = 0
    samples: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    @property
    def draw(self) -> DrawStage:
        """The draw path's state: where each group's stream is."""
        return cast(DrawStage, self.stages[DRAW])

    @property
    def overflow(self) -> OverflowStage:
        """The overflow's state: the samples waiting outside the open pack."""
        return cast(OverflowStage, self.stages[OVERFLOW])

    def waiting(self) -> list[tuple[str, Draw]]:
        """The samples waiting outside the open pack, by the field that saves each."""
        overflow, field = self.overflow, f"stages.{OVERFLOW}"
        held = [(f"{field}.buffer[{index}]", draw) for index, draw in enumerate(overflow.buffer)]
        return held + ([(f"{field}.carry", overflow.carry)] if overflow.carry is not None else [])

    @property
    def step_base(self) -> int:
        """The rank's step this stream's first pack follows (after an elastic restart, the
        step the old run reached; `checkpoint/merge.py`); 0 for a fresh run."""
        return int((self.history or {}).get("steps", 0))

    def to_dict(self, group_names: list[str]) -> dict:
        return {
            "version": STATE_VERSION,
            "topology": dataclasses.asdict(self.topology),
            "data_seed": self.data_seed,
            "units": dict(zip(group_names, self.units)),
            "rng": self.rng.get_state(),
            "packs": self.packs,
            "tokens": self.tokens,
            "samples": dict(self.samples),
            "stages": {key: stage.state_dict() for key, stage in self.stages.items()},
            "skips": {name: log.as_dict() for name, log in zip(group_names, self.logs)},
            "restart": self.restart,
            "history": self.history,
            "inputs": None if self.inputs is None else dict(zip(group_names, self.inputs)),
            "tokenizer": self.tokenizer,
            "orders": self.orders,
        }

    def restore(self, saved: dict, group_names: list[str]) -> None:
        """Load a checkpoint made by `to_dict` (`checkpoint/stream.py` upgraded it to this
        version and checked that it belongs to this pipeline and has the shape read here);
        each stage loads its own part, checking it."""
        saved_topology = WorkerTopology(**saved["topology"])
        if saved_topology != self.topology:
            raise ResumeError(
                f"checkpoint saved by {saved_topology}, loaded into {self.topology}: restart with the "
                "same world size, rank and DataLoader worker count, or merge the checkpoints of all "
                "workers with PackedDataset.load_elastic_state (see docs/elastic.md)"
            )
        self.restart, self.history = saved["restart"], saved["history"]
        set_rng_state(self.rng, saved["rng"])
        self.packs, self.tokens = saved["packs"], saved["tokens"]
        self.samples = collections.Counter(saved["samples"])
        self.load_stages(saved)
        for name, log in zip(group_names, self.logs):
            log.counts = collections.Counter(saved["skips"].get(name, {}))

    def load_stages(self, saved: Mapping) -> None:
        """Each stage loads its part of `saved["stages"]` (checked against the rest of
        `saved`); a stage the checkpoint has no state for keeps its fresh one (before
        version 4 there was no backlog: the counts it paces by are not read until the next
        change point, which restarts them), unless it needs one (the draw path's cursors)."""
        stages = saved.get("stages") or {}
        unknown = sorted(set(stages) - set(self.stages))
        if unknown:
            raise ResumeError(
                f"checkpoint field stages names unknown stage(s) {unknown}; this packer has {sorted(self.stages)}"
            )
        for key, stage in self.stages.items():
            stage.load_state_dict(stages.get(key) or {}, saved)


def set_rng_state(rng: RandomSource, state: Any) -> None:
    """Load a saved `rng` field into the packer's random source, checked: a state of the
    other mode, or out of range, is a ResumeError naming the field (not an OverflowError
    at the first pack)."""
    saved_kind = "bagel" if isinstance(state, Mapping) and state.get("compat") == "bagel" else "numpy"
    if saved_kind != rng.kind:
        raise ResumeError('the checkpoint and this pipeline disagree on compat="bagel"; resume in the same mode')
    try:
        rng.set_state(dict(state))
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        raise ResumeError(f"checkpoint field rng: {shown(str(exc))}; resume from an unedited checkpoint") from None


def plain_cursor(cursor):
    """A cursor as a checkpoint saves it (a list of ints, or None)."""
    return None if cursor is None else [int(value) for value in cursor]


def tuple_cursor(cursor):
    """A saved cursor as the packer holds it (a tuple of ints, or None)."""
    return None if cursor is None else tuple(int(value) for value in cursor)
