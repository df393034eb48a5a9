"""A resumable DataLoader over a packed dataset (torchdata's StatefulDataLoader)."""

from __future__ import annotations

import collections
import dataclasses
import warnings
from typing import Any

import numpy as np
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from .batch import bagel_packed_collate_fn, collate_wrapper
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


@dataclasses.dataclass(frozen=True)
class BagelDataloaderBuild:
    """What `BagelDataloaderConfig.build` returns: the loader and the dataset under it."""

    dataloader: StatefulDataLoader
    dataset: Any  # the PackedDataset


@dataclasses.dataclass
class BagelDataloaderConfig:
    """NeMo AutoModel's loader config: a `BagelDatasetConfig` plus the DataLoader settings."""

    dataset_config: Any  # a BagelDatasetConfig
    num_workers: int = 1
    pin_memory: bool = True
    prefetch_factor: int = 2

    def build(self, *, tokenizer, special_tokens, rank: int, world_size: int, batch_size: int, global_seed):
        """Build the dataset (`dataset_config.build`) and a StatefulDataLoader over it.

        A pack is the batch, so `batch_size` must be 1. Unlike NeMo AutoModel, nothing here
        reseeds Python's, numpy's or torch's global generators: the pipeline's randomness
        is its own, derived from `data_seed` and `global_seed` (docs/coming_from.md).
        """
        if batch_size != 1:
            raise ValueError(
                f"BAGEL packed dataloaders need local_batch_size=1 (one pack per step), got {batch_size}; "
                "raise expected_num_tokens / max_num_tokens for more tokens per step"
            )
        dataset = self.dataset_config.build(
            tokenizer=tokenizer,
            special_tokens=special_tokens,
            rank=rank,
            world_size=world_size,
            num_workers=self.num_workers,
            global_seed=global_seed,
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*set_vital.*")
            loader = StatefulDataLoader(
                dataset,
                batch_size=batch_size,
                num_workers=self.num_workers,
                pin_memory=self.pin_memory,
                collate_fn=bagel_packed_collate_fn,  # the module's name, read at build time
                drop_last=True,
                prefetch_factor=self.prefetch_factor if self.num_workers > 0 else None,
                generator=_loader_generator(global_seed, rank, dataset),
            )
        return BagelDataloaderBuild(dataloader=loader, dataset=dataset)


def _loader_generator(global_seed, rank: int, dataset) -> torch.Generator:
    """The generator torch draws each iteration's worker base seed from: without it, every
    `iter(loader)` would take a draw from the caller's global torch generator."""
    seed = [0 if global_seed is None else int(global_seed), int(rank), int(getattr(dataset, "data_seed", 0))]
    state = np.random.SeedSequence([value & 0xFFFFFFFF for value in seed]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


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
    "BagelDataloaderBuild",
    "BagelDataloaderConfig",
    "build_dataloader",
    "merged_stats",
    "worker_dataset_states",
]
