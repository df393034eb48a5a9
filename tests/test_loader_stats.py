"""The skip counts of all workers are visible in the main process (`merged_stats`)."""

from __future__ import annotations

import itertools

from bagel_data import ImageTransform, T2IIterableDataset, build_dataloader
from bagel_data.loader import merged_stats, worker_dataset_states
from bagel_data.packing.config import PackingConfig
from helpers.builders import solid_jpeg, write_t2i
from helpers.fake_groups import one_group_packed

GOOD = {"image": solid_jpeg(64, 48), "captions": {"c": "a red square"}}
BAD = {"image": b"junk", "captions": {"c": "x"}}


def test_merged_stats_sums_the_workers(tmp_path, tokenizer, special_tokens):
    write_t2i(tmp_path, [[[GOOD, BAD, GOOD]], [[BAD, GOOD, BAD, GOOD]]])
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(tmp_path)], [2], num_workers=2)
    config = PackingConfig(expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70)
    dataset = one_group_packed("t2i", family, config, special_tokens, num_workers=2)
    loader = build_dataloader(dataset, num_workers=2)
    batches = list(itertools.islice(loader, 6))
    assert dataset.stats["skips"] == {}  # the main process did no work
    stats = merged_stats(loader)
    states = worker_dataset_states(loader.state_dict())
    assert len(states) == 2
    expected = sum(state["skips"]["t2i"].get("image_decode_failed", 0) for state in states)
    assert expected > 0 and stats["skips"] == {"t2i": {"image_decode_failed": expected}}
    assert all(state["skips"]["t2i"] for state in states), "both workers met bad rows"
    assert stats["packs"] == len(batches)
    assert stats["samples"]["t2i"] == sum(len(b.to_dict()["sample_lens"]) for b in batches)
