"""Two data seeds are two streams: seeds equal in their low 32 bits (5 and 5 + 2**32, -1
and 2**32 - 1) must not give the same group choices, dropout decisions or per-row draws,
while a seed within 0 .. 2**32 - 1 keeps the streams it always gave (the conformance cases
pin those)."""

from __future__ import annotations

import itertools

import pytest

from bagel_data import ImageTransform, T2IIterableDataset
from bagel_data.compat.streams import SeededRandom, seed_tail
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.groups import GroupSource
from helpers.builders import solid_jpeg, write_t2i
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.plans import TOKENS_DICT, text_sample

TWINS = [(5, 5 + 2**32), (-1, 2**32 - 1), (7, 7 - 2**32), (3, 3 + 2**64)]


def _choices(seed: int) -> list:
    groups = {
        n: FakeGroup(n, lambda i, n=n, k=k: text_sample(10 + (i * 37 + k * 11) % 60, index=i, dataset_name=n))
        for k, n in enumerate("ab")
    }
    config = PackingConfig(expected_num_tokens=90, max_num_tokens=100, max_num_tokens_per_sample=80)
    packed = packed_groups(groups, config, TOKENS_DICT, seed=seed)
    return [[w["dataset_name"] for w in b["batch_data_indexes"]] for b in itertools.islice(iter(packed), 20)]


@pytest.mark.parametrize(("seed", "twin"), TWINS)
def test_the_packers_group_choices_differ(seed, twin):
    assert _choices(seed) != _choices(twin)


@pytest.mark.parametrize(("seed", "twin"), TWINS)
def test_the_dropout_generators_differ(seed, twin):
    group = GroupSource(0, "g", None)
    draws = [group.dropout_rng(s, (0, 3, 1), None).random(4).tolist() for s in (seed, twin)]
    assert draws[0] != draws[1]


@pytest.mark.parametrize(("seed", "twin"), TWINS)
def test_a_familys_row_generators_differ(tmp_path, tokenizer, seed, twin):
    write_t2i(tmp_path, [[[{"image": solid_jpeg(32, 32), "captions": {"a": "x", "b": "y"}}] * 2]])
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(tmp_path)], [1], num_workers=1)
    draws = []
    for s in (seed, twin):
        family.set_epoch(s)
        draws.append(family.sample_rng(0, 0, 1).random(4).tolist())
    assert draws[0] != draws[1]


def test_a_seed_in_the_32_bit_range_keeps_its_key():
    """Nothing is added for the seeds every run so far used: their streams stay the same."""
    assert seed_tail(5) == seed_tail(0) == seed_tail(2**32 - 1) == []
    assert SeededRandom.from_key([5, 9, *seed_tail(5)]).random() == SeededRandom.from_key([5, 9]).random()
    seeds = (2**32, -(2**32), 2**64, -1, -2, 2**32 - 1, 0)
    assert len({(s & 0xFFFFFFFF, *seed_tail(s)) for s in seeds}) == len(seeds)  # the key's words, as used
