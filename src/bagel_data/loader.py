"""A resumable DataLoader over a packed dataset (torchdata's StatefulDataLoader)."""

from __future__ import annotations

import collections
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


def merged_stats(loader) -> dict:
    """Packs, tokens, samples and skipped rows by reason, summed over all the loader's workers.

    `dataset.stats` only sees the process it is read in, which does no work when the loader
    has workers; this reads every worker's counts out of `loader.state_dict()` (as of the
    batches already handed out). Same shape as `PackedDataset.stats`, without `history`.
    """
    samples, skips = collections.Counter(), {}
    packs = tokens = 0
    for state in worker_dataset_states(loader.state_dict()):
        packs += state["packs"]
        tokens += state["tokens"]
        samples.update(state["samples"])
        for group, counts in state["skips"].items():
            skips.setdefault(group, collections.Counter()).update(counts)
    return {
        "packs": packs,
        "tokens": tokens,
        "samples": dict(samples),
        "skips": {group: dict(counts) for group, counts in skips.items()},
    }


__all__ = ["build_dataloader", "merged_stats", "worker_dataset_states"]
