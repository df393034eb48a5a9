"""Loading a checkpoint that NeMo AutoModel's `PackedDataset.state_dict()` wrote.

Its format (version 1): `yielded_batches`, `buffer` (the raw buffered samples, each with its
`data_indexes`), `sequence_status`, `rng` (the worker's global generator states) and
`grouped_dataset_states` (per group, `{"data_status": [position or None per worker id]}`).
We take its cursors: each group continues just after this worker's position, and the
buffered samples are re-read from their positions and packed first. Positions are the
reference's `data_indexes`, so this is the `data_status` resume plus the buffer. Its global
generator states are not used: our packer's randomness is its own (seeded from `data_seed`,
the rank, the worker and `global_seed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..sample import Draw
from .state import PackState, ResumeError

NEMO_STATE_VERSION = 1
HOW_TO_CONTINUE = (
    "to continue from where that run stopped, rebuild the dataset with "
    "data_status={group: {worker_id: data_indexes}} (the last batch_data_indexes each worker "
    "yielded, as BAGEL's trainer records them; a list of those per rank also works) and do not "
    "load this checkpoint; see docs/coming_from.md"
)

RESUME_AS_REFERENCE = (
    'resume with compat="bagel", which reads the reference\'s files in its order and sharding, so that each '
    "position names the row the reference read; see docs/coming_from.md"
)


class ReferenceCheck(Protocol):
    """What a group answers about reference positions (`packing/groups.GroupSource`)."""

    name: str

    def reference_mismatch(self) -> str | None: ...


def check_reference_positions(groups: Sequence[ReferenceCheck], cursors: list, waiting: list) -> None:
    """A NeMo checkpoint's positions name items of the reference's worker lists: a group
    with one, whose list here is another (`families/positions.py`), would continue on other
    rows, so that is a ResumeError that says to resume with compat="bagel"."""
    positioned = {index for index, cursor in enumerate(cursors) if cursor is not None}
    positioned |= {group for _, group, _ in waiting}
    for index in sorted(positioned):
        mismatch = groups[index].reference_mismatch()
        if mismatch is not None:
            raise ResumeError(
                f"NeMo AutoModel checkpoint: the positions of {groups[index].name} are items of the reference's "
                f"file list, which is not this run's: {mismatch}. They would continue on other rows; "
                f"{RESUME_AS_REFERENCE}"
            )


def is_nemo_state(saved: object) -> bool:
    return (
        isinstance(saved, dict)
        and saved.get("version") == NEMO_STATE_VERSION
        and "grouped_dataset_states" in saved
        and "topology" not in saved
    )


def _cursor(position) -> tuple[int, ...] | None:
    return None if position is None else _position_cursor(position)


def _position_cursor(position) -> tuple[int, ...]:
    """A reference position (`data_indexes`) as a cursor in the first pass."""
    values = position if isinstance(position, (list, tuple)) else [position]
    return (0, *(int(value) for value in values))


def _worker_position(group: str, entry, worker_id: int):
    statuses = None if entry is None else entry.get("data_status")
    if statuses is None:
        return None
    if isinstance(statuses, dict):  # the reference's {worker_id: position}
        return statuses.get(worker_id, statuses.get(str(worker_id)))
    others = [wid for wid, position in enumerate(statuses) if position is not None and wid != worker_id]
    if others:
        raise ResumeError(
            f"NeMo AutoModel checkpoint: {group} holds positions of worker(s) {others} but is loaded into worker "
            f"{worker_id}; use the same num_workers as the run that saved it, or {HOW_TO_CONTINUE}"
        )
    return statuses[worker_id] if worker_id < len(statuses) else None


def load_nemo_state(state: PackState, saved: dict, group_names: list[str]) -> None:
    """Set `state`'s pack count and its stages' cursors (the draw path's) and buffer (the
    overflow's) from a NeMo AutoModel checkpoint."""
    groups = saved["grouped_dataset_states"]
    if len(groups) != len(group_names):
        raise ResumeError(
            f"NeMo AutoModel checkpoint with {len(groups)} groups, this pipeline has {len(group_names)} "
            f"({group_names}); configure the same groups in the same order, or {HOW_TO_CONTINUE}"
        )
    worker_id = state.topology.worker_id
    cursors = [_cursor(_worker_position(name, entry, worker_id)) for name, entry in zip(group_names, groups)]
    buffer = state.overflow.buffer
    buffer.clear()
    for sample in saved.get("buffer") or []:
        where = sample.get("data_indexes") if isinstance(sample, dict) else None
        if not isinstance(where, dict) or where.get("dataset_name") not in group_names or "data_indexes" not in where:
            raise ResumeError(
                f"NeMo AutoModel checkpoint: a buffered sample without a known position; {HOW_TO_CONTINUE}"
            )
        group = group_names.index(where["dataset_name"])
        buffer.append(Draw(group, _position_cursor(where["data_indexes"])))
    state.draw.cursors = cursors
    state.packs = int(saved.get("yielded_batches", 0))
