"""A resumable DataLoader over a packed dataset (torchdata's StatefulDataLoader)."""

from __future__ import annotations

import warnings

from torchdata.stateful_dataloader import StatefulDataLoader

from .batch import collate_wrapper
from .checkpoint.collect import worker_dataset_states  # re-exported: where users look for it


def build_dataloader(
    dataset,
    num_workers: int | None = None,
    pin_memory: bool = False,
    prefetch_factor: int | None = 2,
    persistent_workers: bool = False,
) -> StatefulDataLoader:
    """Batch size 1 (a pack is the batch), the packed collate, and per-worker state.

    `num_workers` defaults to the count the dataset was sharded for; a different count
    would shard units for workers that do not exist.
    """
    workers = dataset.num_workers if num_workers is None else num_workers
    with warnings.catch_warnings():
        # torchdata calls a deprecated torch telemetry hook on construction; nothing to act on.
        warnings.filterwarnings("ignore", message=".*set_vital.*")
        return _stateful_loader(dataset, workers, pin_memory, prefetch_factor, persistent_workers)


def _stateful_loader(dataset, workers, pin_memory, prefetch_factor, persistent_workers) -> StatefulDataLoader:
    return StatefulDataLoader(
        dataset,
        batch_size=1,
        num_workers=workers,
        collate_fn=collate_wrapper(),
        pin_memory=pin_memory,
        prefetch_factor=prefetch_factor if workers > 0 else None,
        persistent_workers=persistent_workers and workers > 0,
        drop_last=True,
    )


__all__ = ["build_dataloader", "worker_dataset_states"]
