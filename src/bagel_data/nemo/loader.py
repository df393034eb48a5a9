"""NeMo AutoModel's loader config: a `BagelDatasetConfig` plus the DataLoader settings.

Mirrors `nemo_automodel.components.datasets.multimodal.loader`. The loader is the core's
`PackedDataLoader` (a StatefulDataLoader whose `load_state_dict` checks the worker count);
the collate function is this module's `bagel_packed_collate_fn`, looked up when `build` runs.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from ..batch import bagel_packed_collate_fn
from ..loader import PackedDataLoader


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
        """Build the dataset (`dataset_config.build`) and a resumable loader over it.

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
            loader = PackedDataLoader(
                dataset,
                batch_size=batch_size,
                num_workers=self.num_workers,
                pin_memory=self.pin_memory,
                collate_fn=bagel_packed_collate_fn,  # this module's name, read at build time
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


__all__ = ["BagelDataloaderBuild", "BagelDataloaderConfig", "bagel_packed_collate_fn"]
