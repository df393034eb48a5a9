"""`build_dataloader`'s defaults: one pack a batch, workers as the dataset was sharded for,
nothing pinned unless asked (pinning needs an accelerator), prefetch and persistence only
with worker processes."""

from __future__ import annotations

from torch.utils.data import IterableDataset

from bagel_data import build_dataloader


class Sharded(IterableDataset):
    def __init__(self, num_workers: int):
        self.num_workers = num_workers

    def __iter__(self):
        return iter(())


def test_the_defaults():
    loader = build_dataloader(Sharded(2))
    assert (loader.batch_size, loader.num_workers, loader.pin_memory) == (1, 2, False)
    assert (loader.prefetch_factor, loader.persistent_workers, loader.drop_last) == (2, False, True)


def test_in_process_the_worker_options_are_left_unset():
    loader = build_dataloader(Sharded(3), num_workers=0, persistent_workers=True)
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (0, None, False)


def test_one_worker_is_a_worker_process():
    loader = build_dataloader(Sharded(1), persistent_workers=True, prefetch_factor=3)
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (1, 3, True)
