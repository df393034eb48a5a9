"""Which read-ahead a group's stream gets (packing/groups.py): by default none on local disk,
where it buys nothing, and `READ_AHEAD_BYTES` where the group's files are remote; a
`read_ahead_bytes` that is set applies everywhere."""

from __future__ import annotations

import itertools
import threading

import pytest

from bagel_data import ImageTransform, T2IIterableDataset
from bagel_data.packing.config import PackingConfig
from bagel_data.schema.settings import READ_AHEAD_BYTES
from bagel_data.sources.read_ahead import POOL_NAME
from helpers.fake_groups import one_group_packed
from helpers.noise_t2i import write_noise_t2i


def _packed(folder, tokenizer, special_tokens, remote: bool, **settings):
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(folder)], [3], num_workers=1)
    if remote:  # as a family whose files are on an object store says
        family.reads_remote = lambda: True  # type: ignore[method-assign]
    config = PackingConfig(expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70, **settings)
    return one_group_packed("t2i", family, config, special_tokens)


def _pool_threads() -> int:
    return sum(thread.name.startswith(POOL_NAME) for thread in threading.enumerate())


def _budget_after_packs(dataset, count: int = 3) -> int | None:
    """The stream's read-ahead budget as its stats say, read while the stream runs."""
    stream = iter(dataset)
    try:
        list(itertools.islice(stream, count))
        stats = dataset.stats["read_ahead"].get("t2i")
        return None if stats is None else stats["budget_bytes"]
    finally:
        stream.close()


def test_local_files_are_read_inline_by_default_and_start_no_threads(tmp_path, tokenizer, special_tokens):
    write_noise_t2i(tmp_path)
    before = _pool_threads()
    dataset = _packed(tmp_path, tokenizer, special_tokens, remote=False)
    stream = iter(dataset)
    try:
        list(itertools.islice(stream, 3))
        assert dataset.stats["read_ahead"] == {}
        assert _pool_threads() == before
    finally:
        stream.close()


@pytest.mark.parametrize(
    ("remote", "setting", "budget"),
    [
        (True, None, READ_AHEAD_BYTES),  # the default, where reading ahead pays
        (False, 1 << 20, 1 << 20),  # set: it applies on local disk too
        (True, 1 << 20, 1 << 20),
        (True, 0, None),  # 0 reads inline everywhere
    ],
)
def test_the_budget_a_stream_gets(tmp_path, tokenizer, special_tokens, remote, setting, budget):
    write_noise_t2i(tmp_path)
    dataset = _packed(tmp_path, tokenizer, special_tokens, remote=remote, read_ahead_bytes=setting)
    assert _budget_after_packs(dataset) == budget
