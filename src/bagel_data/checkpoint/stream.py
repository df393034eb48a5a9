"""Where a packing worker's stream starts, and what its checkpoint says: one start path.

A stream starts from one of four inputs: nothing (fresh, or the reference's `data_status`
that each group reads itself), this library's own checkpoint, a NeMo AutoModel checkpoint
(`foreign.py`), or an elastic-restart checkpoint (`merge.py`). Each is read into a `Start`
(the restart plan the groups run under, the generator's generation, and what it loads
into a fresh state); `start_state` then does the same for all: give the groups their
plan, make the fresh state, load, and check every cursor against the worker's work list.
Every field is checked before use (`checks.py`); what is wrong is a `ResumeError`.

The packer (`packing/packed_dataset.py`) describes itself as a `StreamSetup`; this module
never imports the packer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..compat import CompatPolicy
from ..compat.streams import seed_tail
from ..errors import SkipLog, shown
from ..sharding import WorkerTopology
from .checks import check_cursor_ranges, check_shape, check_waiting_drawn
from .foreign import check_reference_positions, is_nemo_state, load_nemo_state
from .merge import apply_restart, is_elastic
from .orders import follow_orders, group_orders
from .state import READABLE_VERSIONS, PackState, ResumeError, Stage, check_compatible, upgrade

_GLOBAL_SEED_TAG = 0x6105
_PACKER_STREAM = 0x9ACC


class StreamGroup(Protocol):
    """What a start asks of a group (`packing/groups.GroupSource` is one)."""

    name: str
    dataset: Any

    def new_log(self) -> SkipLog: ...
    def resume_cursor(self, worker_id: int) -> tuple | None: ...
    def input_record(self) -> dict | None: ...
    def unit_count(self) -> int: ...
    def cursor_problem(self, cursor: tuple) -> str | None: ...
    def reference_mismatch(self) -> str | None: ...
    def set_restart_plan(self, plan: Any) -> None: ...
    def row_order(self) -> dict | None: ...
    def set_row_order(self, order: dict) -> None: ...


@dataclasses.dataclass(frozen=True)
class StreamSetup:
    """What a worker's stream is made of, as far as a start and a checkpoint care."""

    groups: Sequence[StreamGroup]
    local_rank: int
    world_size: int
    data_seed: int
    global_seed: int | None
    policy: CompatPolicy
    # The packing stages' fresh states, by key: the draw path's and the overflow's at least
    # (`state.DRAW`, `state.OVERFLOW`), first.
    new_stages: Callable[[], dict[str, Stage]]
    tokenizer: dict | None = None  # the fingerprint a checkpoint records and is checked against (tokens.py)

    @property
    def group_names(self) -> list[str]:
        return [group.name for group in self.groups]

    @property
    def grouped_datasets(self) -> list[Any]:
        return [group.dataset for group in self.groups]

    def topology(self) -> WorkerTopology:
        return WorkerTopology.current(self.local_rank, self.world_size)

    def group_unit_counts(self) -> list[int]:
        return [group.unit_count() for group in self.groups]

    def group_inputs(self) -> list[dict | None]:
        return [group.input_record() for group in self.groups]


@dataclasses.dataclass(frozen=True)
class Start:
    """A checkpoint read and checked: the plan the groups run under, the generation the
    packer's generator is keyed by, and what it sets in the fresh state."""

    restart: dict | None = None
    generation: int = 0
    load: Callable[[PackState], None] = lambda state: None
    reference_positions: bool = False  # its cursors are the reference's (NeMo AutoModel's)


def fresh_state(setup: StreamSetup, generation: int = 0) -> PackState:
    """A stream's state before its first pack: each group where the reference's
    `data_status` says (or at its start), the packer's generator keyed by the seed, the
    rank, the worker, the restart generation and `global_seed`."""
    topology = setup.topology()
    key = [setup.data_seed, topology.rank, topology.worker_id, _PACKER_STREAM]
    key += [generation] if generation else []  # each elastic restart draws afresh
    if setup.global_seed is not None:  # a distinct tail: cannot collide with a generation
        key += [_GLOBAL_SEED_TAG, setup.global_seed, setup.global_seed >> 32]
    key += seed_tail(setup.data_seed)  # a seed beyond 32 bits: its higher words (none for others)
    rng = setup.policy.packer_random(setup.data_seed, key)
    logs = [group.new_log() for group in setup.groups]
    state = PackState(topology, setup.data_seed, setup.group_unit_counts(), rng, logs, setup.new_stages())
    state.draw.cursors = [group.resume_cursor(topology.worker_id) for group in setup.groups]
    state.inputs = setup.group_inputs()
    state.tokenizer = setup.tokenizer
    state.orders = group_orders(setup.groups)
    return state


def start_state(setup: StreamSetup, saved: Any) -> PackState:
    """The state a stream starts from, whichever of the four inputs `saved` is."""
    start = _checked(read_start, setup, saved)
    _checked(apply_restart, setup, start.restart)
    state = fresh_state(setup, start.generation)
    _checked(start.load, state)
    waiting = [(field, draw.group, draw.cursor) for field, draw in state.waiting()]
    cursors = state.draw.cursors
    if start.reference_positions:
        check_reference_positions(setup.groups, cursors, waiting)
    check_cursor_ranges(setup.groups, setup.group_names, cursors, waiting)
    check_waiting_drawn(setup.group_names, cursors, waiting)
    return state


def _checked(step: Callable, *args):
    """`step(*args)`; whatever a malformed checkpoint still gets past the checks is a
    ResumeError, never a bare KeyError deep in a worker."""
    try:
        return step(*args)
    except ResumeError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ResumeError(f"malformed checkpoint ({type(exc).__name__}: {shown(str(exc))})") from None


def read_start(setup: StreamSetup, saved: Any) -> Start:
    """`saved` (None, or a checkpoint of any kind this library reads) as a checked `Start`."""
    names = setup.group_names
    if saved is None:
        return Start()
    if is_nemo_state(saved):  # written by NeMo AutoModel's PackedDataset
        return Start(load=lambda state: load_nemo_state(state, saved, names), reference_positions=True)
    if not isinstance(saved, Mapping):
        raise ResumeError(f"a checkpoint is a dict (PackedDataset.state_dict()), not {shown(saved, 80)}")
    saved = dict(saved)
    if is_elastic(saved):
        check_compatible(
            saved, setup.data_seed, names, setup.group_unit_counts(), setup.group_inputs(), setup.tokenizer
        )
        follow_orders(setup.groups, saved)
        restart = saved["restart"]

        def inherit(state: PackState) -> None:
            state.draw.cursors = [None] * len(names)  # each group starts with its inherited samples
            state.restart, state.history = restart, saved["history"]

        return Start(restart, restart["generation"], inherit)
    saved = upgrade(saved)  # an older version's fields where this one keeps them
    if saved.get("version") in READABLE_VERSIONS:  # any other version gets its own message
        check_shape(saved, names)
    check_compatible(saved, setup.data_seed, names, setup.group_unit_counts(), setup.group_inputs(), setup.tokenizer)
    follow_orders(setup.groups, saved)
    return Start(saved.get("restart"), 0, lambda state: state.restore(saved, names))


def save_state(setup: StreamSetup, live: PackState | None, resume: Any) -> dict:
    """The checkpoint of a worker's stream (torchdata's Stateful protocol): the running
    iteration's, else what the next iteration would start from."""
    if live is not None:
        return live.to_dict(setup.group_names)
    if resume is not None and isinstance(resume, Mapping) and is_elastic(dict(resume)):
        # Before its first batch under a restart plan: the worker's own starting state, which a
        # later elastic restart can merge like any other worker's.
        return start_state(setup, resume).to_dict(setup.group_names)
    if resume is not None:
        return dict(resume)
    return fresh_state(setup).to_dict(setup.group_names)
