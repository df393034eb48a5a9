"""The resumable state of a packing worker, and its checkpoint form.

A checkpoint holds *where* things are, never the tensors: each group's cursor (the last
sample drawn), the packer's generator state, the overflow buffer and the carried sample as
the cursors of their samples (rebuilt on restore by re-reading those rows with the same
per-sample randomness), and the counters. Its size does not depend on image sizes.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from ..compat import CompatRandom
from ..errors import ResumeError, SkipLog
from ..sharding import WorkerTopology
from .inputs import check_inputs

# 2: in-process topology has num_workers=0; elastic-restart plans (restart.py).
STATE_VERSION = 2


def check_compatible(
    saved: dict, data_seed: int, group_names: list[str], units: list[int], inputs: list[dict | None] | None = None
) -> None:
    """Raise ResumeError unless `saved` was made by this library for the same data and groups
    (`units`: how many units each group has now; `inputs`: each group's `input_record`)."""
    if saved.get("version") != STATE_VERSION:
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


@dataclasses.dataclass
class Buffered:
    """A sample waiting in the overflow buffer; `sample` is None until rebuilt."""

    group: int
    cursor: tuple
    # The sample dict. None only for an item restored from a checkpoint (it holds cursors,
    # not samples) until `PackedDataset._materialize` (packing/placement.py) rebuilds it,
    # before any other use.
    sample: Any = None
    rng_state: dict | None = None  # compat="bagel": the shared stream before the sample's row
    waited: int = 0  # best-fit: packs this oldest sample found no room beside the mandatory ones
    # Resume: the queue rebuilding this sample ahead on other threads (`packing/rebuild.py`),
    # which `_materialize` asks before rebuilding it itself; never saved.
    rebuilt: Any = None


@dataclasses.dataclass
class PackState:
    """Everything a packing worker needs to continue exactly where it stopped."""

    topology: WorkerTopology
    data_seed: int
    units: list[int]  # units per group: a checkpoint only fits the same data
    rng: Any  # np.random.Generator; compat="bagel": a CompatRandom (compat.py)
    cursors: list[tuple | None]
    buffer: collections.deque
    logs: list[SkipLog]
    carry: Buffered | None = None  # the sample that ended the last pack; first in the next
    restart: dict | None = None  # the elastic-restart plan this stream runs under (restart.py)
    history: dict | None = None  # totals of the topology before the last elastic restart
    inputs: list[dict | None] | None = None  # each group's input files and sizes (inputs.py)
    packs: int = 0
    tokens: int = 0
    samples: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    group_tokens: list[int] = dataclasses.field(default_factory=list)  # drawn and not skipped, per group
    empty_run: int = 0  # samples in a row that added nothing to a pack (placement.py); not saved

    def __post_init__(self) -> None:
        if not self.group_tokens:
            self.group_tokens = [0] * len(self.units)

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
            "rng": _rng_state(self.rng),
            "cursors": {name: _plain(cursor) for name, cursor in zip(group_names, self.cursors)},
            "buffer": [_buffered(group_names, item) for item in self.buffer],
            "carry": None if self.carry is None else [group_names[self.carry.group], _plain(self.carry.cursor)],
            "packs": self.packs,
            "tokens": self.tokens,
            "samples": dict(self.samples),
            "group_tokens": dict(zip(group_names, self.group_tokens)),
            "skips": {name: log.as_dict() for name, log in zip(group_names, self.logs)},
            "restart": self.restart,
            "history": self.history,
            "inputs": None if self.inputs is None else dict(zip(group_names, self.inputs)),
        }

    def restore(self, saved: dict, group_names: list[str]) -> None:
        """Load a checkpoint made by `to_dict`, after checking it belongs to this pipeline."""
        check_compatible(saved, self.data_seed, group_names, self.units, self.inputs)
        saved_topology = WorkerTopology(**saved["topology"])
        if saved_topology != self.topology:
            raise ResumeError(
                f"checkpoint saved by {saved_topology}, loaded into {self.topology}: restart with the "
                "same world size, rank and DataLoader worker count, or merge the checkpoints of all "
                "workers with PackedDataset.load_elastic_state (see docs/elastic.md)"
            )
        self.restart, self.history = saved["restart"], saved["history"]
        _set_rng_state(self.rng, saved["rng"])
        self.cursors = [_tuple(saved["cursors"][name]) for name in group_names]
        self.buffer = collections.deque(
            Buffered(
                group_names.index(entry[0]),
                _tuple(entry[1]),
                None,
                entry[2] if len(entry) > 2 else None,
                int(entry[3]) if len(entry) > 3 else 0,
            )
            for entry in saved["buffer"]
        )
        carry = saved.get("carry")
        self.carry = None if carry is None else Buffered(group_names.index(carry[0]), _tuple(carry[1]))
        self.packs, self.tokens = saved["packs"], saved["tokens"]
        self.samples = collections.Counter(saved["samples"])
        saved_tokens = saved.get("group_tokens", {})
        self.group_tokens = [int(saved_tokens.get(name, 0)) for name in group_names]
        for name, log in zip(group_names, self.logs):
            log.counts = collections.Counter(saved["skips"].get(name, {}))


def _rng_state(rng) -> dict:
    return rng.get_state() if isinstance(rng, CompatRandom) else rng.bit_generator.state


def _set_rng_state(rng, state: dict) -> None:
    if isinstance(rng, CompatRandom) != (state.get("compat") == "bagel"):
        raise ResumeError('the checkpoint and this pipeline disagree on compat="bagel"; resume in the same mode')
    if isinstance(rng, CompatRandom):
        rng.set_state(state)
    else:
        rng.bit_generator.state = state


def _buffered(group_names: list[str], item: Buffered) -> list:
    """A buffered sample by reference: [group, cursor] (+ the compat stream state before it,
    + how many packs it waited, when it did)."""
    entry = [group_names[item.group], _plain(item.cursor)]
    if item.waited:  # best-fit's wait beside mandatory samples, kept so that resume is exact
        return [*entry, item.rng_state, item.waited]
    return entry if item.rng_state is None else [*entry, item.rng_state]


def _plain(cursor):
    return None if cursor is None else [int(value) for value in cursor]


def _tuple(cursor):
    return None if cursor is None else tuple(int(value) for value in cursor)
