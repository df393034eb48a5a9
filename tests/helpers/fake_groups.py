"""A stand-in for a family when testing the packed dataset's mixing loop."""

from __future__ import annotations

import itertools

import torch


class FakeGroup(torch.utils.data.IterableDataset):
    """A group source of hand-built samples: sample `i` is `make(i)`, with `data_indexes` i.

    It offers what `PackedDataset` reads from a family: `set_epoch`, `__iter__`, and the
    cursor protocol (`iter_samples`, `sample_at`, `resume_cursor`, `strict`, ...). Every
    drawn index is recorded in `drawn`.
    """

    def __init__(self, name: str, make):
        super().__init__()
        self.name, self.make = name, make
        self.strict, self.max_consecutive_failures, self.data_status = False, 100, None
        self.epoch_seed, self.drawn = None, []

    def set_epoch(self, seed: int) -> None:
        self.epoch_seed = seed

    def sample_at(self, cursor, rng_state=None, log=None) -> dict:
        sample = self.make(cursor[0])
        sample["data_indexes"] = {"data_indexes": cursor[0], "worker_id": 0, "dataset_name": self.name}
        return sample

    def resume_cursor(self, worker_id: int):
        return None

    def iter_samples(self, after=None, log=None):
        for i in itertools.count(0 if after is None else after[0] + 1):
            self.drawn.append(i)
            yield (i,), self.sample_at((i,))

    def __iter__(self):
        for _, sample in self.iter_samples():
            yield sample


def packed_groups(
    groups: dict, config, special_tokens: dict, *, weights=None, mandatory=None, seed=0, num_workers=1, policy=None
):
    """A packed dataset over `groups`, rank 0 of 1; every group weighs 1 and none is
    mandatory unless `weights` / `mandatory` say otherwise; `policy`: a CompatPolicy."""
    from bagel_data.packing.packed_dataset import PackedDataset

    return PackedDataset.from_groups(
        groups,
        config,
        special_tokens,
        weights=weights or dict.fromkeys(groups, 1.0),
        mandatory=mandatory or dict.fromkeys(groups, False),
        local_rank=0,
        world_size=1,
        num_workers=num_workers,
        data_seed=seed,
        policy=policy,
    )


def one_group_packed(name: str, dataset, config, special_tokens: dict, num_workers: int = 1):
    """A packed dataset over one (non-mandatory) group, rank 0 of 1, seed 0."""
    return packed_groups({name: dataset}, config, special_tokens, num_workers=num_workers)
