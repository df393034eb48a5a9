"""A resumable DataLoader over a packed dataset (torchdata's StatefulDataLoader).

NeMo AutoModel's `BagelDataloaderConfig` is a face over `PackedDataLoader`: `bagel_data.nemo.loader`.
"""

from __future__ import annotations

import collections
import warnings

from torchdata.stateful_dataloader import StatefulDataLoader

from .batch import collate_wrapper
from .checkpoint.collect import worker_dataset_states  # re-exported: where users look for it
from .errors import ResumeError


def _saved_num_workers(state_dict: dict) -> int:
    """The worker count a torchdata loader state was saved with (0: no worker processes)."""
    main = state_dict.get("_snapshot", {}).get("_main_snapshot", {})
    return int(main.get("_num_workers", 0))


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


class PackedDataLoader(StatefulDataLoader):
    """A StatefulDataLoader whose `load_state_dict` checks the worker count first: torchdata
    would fail later, inside its iterator, with a bare AssertionError."""

    def load_state_dict(self, state_dict: dict) -> None:
        if state_dict:
            saved = _saved_num_workers(state_dict)
            if saved != self.num_workers:
                raise ResumeError(
                    f"this loader checkpoint was saved with num_workers={saved}, but this loader has "
                    f"num_workers={self.num_workers}. Build the dataset and loader with num_workers={saved} "
                    "to resume exactly, or, to change the worker count, do an elastic restart: "
                    "dataset.load_elastic_state(worker_dataset_states(state)) on a fresh dataset, before "
                    "building the loader, and load no loader state (docs/elastic.md)."
                )
        super().load_state_dict(state_dict)


def _stateful_loader(dataset, workers, pin_memory, prefetch_factor, persistent_workers) -> StatefulDataLoader:
    return PackedDataLoader(
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
    samples: collections.Counter[str] = collections.Counter()
    skips: dict[str, collections.Counter[str]] = {}
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


__all__ = [
    "PackedDataLoader",
    "build_dataloader",
    "merged_stats",
    "worker_dataset_states",
]
