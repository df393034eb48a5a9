"""The group interface (packing/groups.py). Which read-ahead a group's stream gets: by
default none on local disk, where it buys nothing, and `READ_AHEAD_BYTES` where the group's
files are remote; a `read_ahead_bytes` that is set applies everywhere. What a stand-in and a
family answer: dropout generators, row locations, unit counts; a zero-length draw's skip."""

from __future__ import annotations

import itertools
import threading
import types

import pytest

from bagel_data import ImageTransform, T2IIterableDataset
from bagel_data.errors import SkipReason
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.groups import FamilyGroup, GroupSource
from bagel_data.schema.settings import READ_AHEAD_BYTES
from bagel_data.sources.read_ahead import POOL_NAME
from helpers.fake_groups import FakeGroup, one_group_packed, packed_groups
from helpers.noise_t2i import write_noise_t2i
from helpers.plans import TOKENS_DICT, text_sample


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


def _draws(random_source, count: int = 8) -> list[float]:
    return [random_source.random() for _ in range(count)]


def test_a_stand_in_s_dropout_generator_is_its_own_per_group_seed_and_cursor():
    """Keyed by the group's name, the cursor and the whole data seed: two groups at the same
    cursor, or two seeds equal in their low 32 bits, drop differently; the same key again
    gives the same draws."""
    a, b = GroupSource(0, "a", None), GroupSource(1, "b", None)
    first = _draws(a.dropout_rng(5, (0, 3), None))
    assert _draws(a.dropout_rng(5, (0, 3), None)) == first
    assert _draws(b.dropout_rng(5, (0, 3), None)) != first
    assert _draws(a.dropout_rng(5 + 2**32, (0, 3), None)) != first
    assert _draws(a.dropout_rng(5, (0, 4), None)) != first


class _Family:
    """What a `FamilyGroup` asks of its family, with units that differ per rank."""

    def __init__(self):
        self.epoch_units = ["u0", "u1", "u2", "u3", "u4"]
        self.units = types.SimpleNamespace(rank_unit_ids=[0, 2, 4])

    def row_location(self, row_key):
        return f"f.parquet, row {row_key[-1]}"


def test_a_family_group_names_rows_and_counts_every_rank_s_units():
    group = FamilyGroup(0, "t2i", _Family())
    assert group.where((4, 0, 7), (0, 1)) == "f.parquet, row 7"
    assert group.where(None, (0, 1)) == "t2i cursor [0, 1]"  # a row not known: its cursor
    assert group.unit_count() == 5  # the group's, which every rank's checkpoint agrees on


def test_a_zero_length_draw_is_skipped_and_counted_as_an_invalid_sample():
    def make(i):
        sample = text_sample(20, index=i, dataset_name="a")
        if i == 1:
            sample["sequence_plan"] = []
        return sample

    config = PackingConfig(expected_num_tokens=30, max_num_tokens=40, max_num_tokens_per_sample=35)
    dataset = packed_groups({"a": FakeGroup("a", make)}, config, TOKENS_DICT)
    batches = list(itertools.islice(iter(dataset), 3))
    packed = [w["data_indexes"] for batch in batches for w in batch["batch_data_indexes"]]
    assert 1 not in packed and packed[:2] == [0, 2]
    assert dataset.state_dict()["skips"]["a"] == {SkipReason.SAMPLE_INVALID.value: 1}
