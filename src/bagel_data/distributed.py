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
