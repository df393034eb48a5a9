"""Rank and world size: explicit arguments first, else torch.distributed, else one process."""

from __future__ import annotations

import torch.distributed as dist


class _Unset(int):
    """An int default that remembers it was not passed (compares equal to its value)."""

    def __repr__(self) -> str:
        return f"{int(self)}"


RANK_UNSET = _Unset(0)
WORLD_UNSET = _Unset(1)


def process_group_ready() -> bool:
    return dist.is_available() and dist.is_initialized()


def resolve_topology(local_rank: int, world_size: int) -> tuple[int, int]:
    """(rank, world size): values the caller passed win; defaults defer to the process group."""
    rank = int(local_rank)
    size = int(world_size)
    if process_group_ready():
        if local_rank is RANK_UNSET:
            rank = dist.get_rank()
        if world_size is WORLD_UNSET:
            size = dist.get_world_size()
    return rank, size


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
