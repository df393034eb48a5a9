"""Collecting worker checkpoints: out of a StatefulDataLoader's state, and across ranks."""

from __future__ import annotations

import torch.distributed as dist

from ..distributed import process_group_ready

# The layout of `StatefulDataLoader.state_dict()` (torchdata 0.11). torchdata offers no
# public accessor for the per-worker dataset states inside it, so these keys are read as
# its own loader reads them (`_MultiProcessingDataLoaderIter._SNAPSHOT` and friends); the
# tests in tests/checkpoint fail if a torchdata release changes them.
_SNAPSHOT, _WORKER_SNAPSHOTS, _DATASET_STATE = "_snapshot", "_worker_snapshots", "dataset_state"


def worker_dataset_states(loader_state: dict) -> list[dict]:
    """The packed dataset's checkpoint of each worker inside a StatefulDataLoader state."""
    if _SNAPSHOT not in loader_state:  # num_workers == 0: the state is the main process's
        state = loader_state.get(_DATASET_STATE)
        return [state] if state else []
    snapshots = loader_state[_SNAPSHOT][_WORKER_SNAPSHOTS]
    return [snapshots[key][_DATASET_STATE] for key in sorted(snapshots) if snapshots[key].get(_DATASET_STATE)]


def gather_worker_states(states: list[dict]) -> list[dict]:
    """Every rank's worker checkpoints, on every rank (a collective: call it on all ranks).

    `states` are this rank's (`loader.worker_dataset_states(loader.state_dict())`). Outside
    a process group of more than one rank they come back as they are. Saving the result once
    (from rank 0) is all an elastic restart needs (`PackedDataset.load_elastic_state`).
    """
    if not process_group_ready() or dist.get_world_size() == 1:
        return list(states)
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, list(states))
    return [state for rank_states in gathered for state in rank_states]
