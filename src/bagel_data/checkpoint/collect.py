"""Collecting worker checkpoints: out of a StatefulDataLoader's state, and across ranks."""

from __future__ import annotations

import torch.distributed as dist

from ..distributed import process_group_ready


def worker_dataset_states(loader_state: dict) -> list[dict]:
    """The packed dataset's checkpoint of each worker inside a StatefulDataLoader state."""
    if "_snapshot" not in loader_state:  # num_workers == 0: the state is the main process's
        state = loader_state.get("dataset_state")
        return [state] if state else []
    snapshots = loader_state["_snapshot"]["_worker_snapshots"]
    return [snapshots[key]["dataset_state"] for key in sorted(snapshots) if snapshots[key].get("dataset_state")]


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
