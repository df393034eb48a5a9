"""The packing loops are picked from one table by `pack_strategy` (packing/loops.py)."""

from __future__ import annotations

import itertools

import pytest

from bagel_data.packing import loops
from bagel_data.packing.config import PackingConfig
from bagel_data.schema.settings import PACK_STRATEGIES
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.plans import TOKENS_DICT, text_sample


def test_every_strategy_has_its_loop():
    assert sorted(loops.PACK_LOOPS) == sorted(PACK_STRATEGIES)


@pytest.mark.parametrize("strategy", PACK_STRATEGIES)
def test_the_configured_strategy_is_the_loop_that_runs(strategy, monkeypatch):
    ran = []
    for name, loop in list(loops.PACK_LOOPS.items()):
        monkeypatch.setitem(
            loops.PACK_LOOPS, name, lambda placer, name=name, loop=loop: ran.append(name) or loop(placer)
        )
    config = PackingConfig(
        expected_num_tokens=90, max_num_tokens=100, max_num_tokens_per_sample=80, prefer_buffer_before=40,
        max_buffer_size=4, use_flex=True, pack_strategy=strategy,
    )  # fmt: skip
    group = FakeGroup("a", lambda i: text_sample(10 + (i * 37) % 60, index=i, dataset_name="a"))
    batches = list(itertools.islice(iter(packed_groups({"a": group}, config, TOKENS_DICT)), 3))
    assert ran == [strategy] and len(batches) == 3
