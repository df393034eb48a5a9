"""`DataMetrics` (metrics.py): per-step data figures for a training loop.

Checked against figures computed here from the batches themselves: shares over the window
and since the start, fill and padding, skips merged over real DataLoader workers, the wait
for data; and the batch the model gets (`to_dict()`) is left exactly as it was.
"""

from __future__ import annotations

import collections
import itertools
import time

import pytest

from bagel_data import ImageTransform, T2IIterableDataset, build_dataloader
from bagel_data.batch import SimpleCustomBatch
from bagel_data.metrics import DataMetrics
from bagel_data.packing.config import PackingConfig
from helpers.builders import solid_jpeg, write_t2i
from helpers.fake_groups import FakeGroup, one_group_packed, packed_groups
from helpers.plans import TOKENS_DICT, text_sample

GOOD = {"image": solid_jpeg(64, 48), "captions": {"c": "a red square"}}
BAD = {"image": b"junk", "captions": {"c": "x"}}
CFG = PackingConfig(
    expected_num_tokens=90,
    max_num_tokens=100,
    max_num_tokens_per_sample=60,
    prefer_buffer_before=50,
    max_buffer_size=4,
    use_flex=True,
    text_cond_dropout_prob=0.0,
    vit_cond_dropout_prob=0.0,
    vae_cond_dropout_prob=0.0,
)


def _batches(count: int, cfg: PackingConfig = CFG) -> list[SimpleCustomBatch]:
    groups = {
        "a": FakeGroup("a", lambda i: text_sample(6 + i % 5, index=i, dataset_name="a")),
        "b": FakeGroup("b", lambda i: text_sample(20 + i % 9, index=i, dataset_name="b")),
    }
    dataset = packed_groups(groups, cfg, TOKENS_DICT, weights={"a": 2.0, "b": 1.0})
    return [SimpleCustomBatch([batch]) for batch in itertools.islice(iter(dataset), count)]


def _shares(batches, what: str) -> dict:
    counts = collections.Counter()
    for batch in batches:
        for where, length in zip(batch.batch_data_indexes, batch.sample_lens):
            counts[where["dataset_name"]] += length if what == "tokens" else 1
    total = sum(counts.values())
    return {name: count / total for name, count in counts.items()}


@pytest.mark.parametrize("use_flex", [True, False])
def test_shares_and_fill_over_the_window_and_since_the_start(use_flex):
    cfg = PackingConfig(**{**CFG.__dict__, "use_flex": use_flex})
    batches = _batches(30, cfg)
    metrics = DataMetrics(window=10, max_num_tokens=cfg.max_num_tokens)
    for batch in batches:
        metrics.update(batch)
    got = metrics.as_dict()
    assert all(isinstance(value, float) for value in got.values())
    assert got["data/steps"] == 30.0
    for name in ("a", "b"):
        assert got[f"data/token_share/{name}"] == pytest.approx(_shares(batches[-10:], "tokens")[name])
        assert got[f"data/token_share/since_start/{name}"] == pytest.approx(_shares(batches, "tokens")[name])
        assert got[f"data/sample_share/{name}"] == pytest.approx(_shares(batches[-10:], "samples")[name])
    fill = sum(b.sequence_length for b in batches[-10:]) / (10 * cfg.max_num_tokens)
    assert got["data/fill"] == pytest.approx(fill) and got["data/padding"] == pytest.approx(1 - fill)
    fill_all = sum(b.sequence_length for b in batches) / (30 * cfg.max_num_tokens)
    assert got["data/fill/since_start"] == pytest.approx(fill_all)
    assert got["data/padding/since_start"] == pytest.approx(1 - fill_all)
    assert got["data/samples_per_pack"] == pytest.approx(sum(len(b.batch_data_indexes) for b in batches[-10:]) / 10)
    assert got["data/token_share/a"] != got["data/token_share/since_start/a"]  # the window is a window


def test_the_batch_the_model_gets_is_unchanged():
    batch = _batches(1)[0]
    before = batch.to_dict()
    keys = list(before)
    metrics = DataMetrics()
    metrics.update(batch)
    metrics.as_dict()
    after = batch.to_dict()
    assert list(after) == keys
    assert all(after[key] is before[key] for key in keys)


def test_skips_are_merged_over_the_workers(tmp_path, tokenizer, special_tokens):
    write_t2i(tmp_path, [[[GOOD, BAD, GOOD]], [[BAD, GOOD, BAD, GOOD]]])
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(tmp_path)], [2], num_workers=2)
    config = PackingConfig(expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70)
    loader = build_dataloader(one_group_packed("t2i", family, config, special_tokens, num_workers=2), num_workers=2)
    metrics = DataMetrics(loader)
    for batch in itertools.islice(metrics.timed(loader), 6):
        metrics.update(batch)
    got = metrics.as_dict()
    from bagel_data.loader import merged_stats

    expected = merged_stats(loader)["skips"]["t2i"]["image_decode_failed"]
    assert expected > 0
    assert got["data/skips/image_decode_failed"] == got["data/skips/total"] == float(expected)
    assert 0 < got["data/fill"] <= 1 and got["data/token_share/t2i"] == 1.0


def test_the_wait_for_data_is_timed():
    batches = _batches(4)

    def slow():
        for batch in batches:
            time.sleep(0.05)
            yield batch

    metrics = DataMetrics()
    for batch in metrics.timed(slow()):
        metrics.update(batch)
    got = metrics.as_dict()
    assert got["data/wait_seconds"] >= 0.05
    assert got["data/wait_seconds/since_start"] >= 4 * 0.05
    untimed = DataMetrics()
    untimed.update(batches[0])
    assert untimed.as_dict()["data/wait_seconds"] == 0.0


def test_a_window_must_hold_a_step():
    with pytest.raises(ValueError, match="window"):
        DataMetrics(window=0)
    batches = _batches(3)
    last = DataMetrics(window=1)  # the smallest window: the last step alone
    for batch in batches:
        last.update(batch)
    got = last.as_dict()
    assert got["data/samples_per_pack"] == float(len(batches[-1].batch_data_indexes))
    assert got["data/token_share/a"] == pytest.approx(_shares(batches[-1:], "tokens").get("a", 0.0))


class _LoaderWithStates:
    """A loader as `merged_stats` reads it: a StatefulDataLoader state holding each worker's
    packed-dataset checkpoint (only the counts it sums)."""

    def __init__(self, workers: list[dict]):
        self.workers = workers

    def state_dict(self) -> dict:
        snapshots = {
            f"worker_{i}": {"dataset_state": {"packs": 1, "tokens": 1, "samples": {}, "skips": skips}}
            for i, skips in enumerate(self.workers)
        }
        return {"_snapshot": {"_worker_snapshots": snapshots}}


def test_skips_of_several_groups_add_up_by_reason():
    loader = _LoaderWithStates(
        [
            {"t2i": {"image_decode_failed": 2, "caption_not_json": 1}, "vlm": {"image_decode_failed": 5}},
            {"t2i": {"image_decode_failed": 3}, "edit": {"image_decode_failed": 7, "json_invalid": 4}},
        ]
    )
    got = DataMetrics(loader).as_dict()
    skips = {key: value for key, value in got.items() if key.startswith("data/skips/")}
    assert skips == {
        "data/skips/caption_not_json": 1.0,
        "data/skips/image_decode_failed": 17.0,  # 2 + 5 + 3 + 7: every group of every worker
        "data/skips/json_invalid": 4.0,
        "data/skips/total": 22.0,
    }


def test_timed_and_untimed_updates_mixed():
    """The wait mean is over the timed steps of the window alone; an untimed update neither
    counts as a wait of 0 nor takes the wait of the timed batch before it."""
    batches = _batches(6)

    def slow(items):
        for batch in items:
            time.sleep(0.05)
            yield batch

    metrics = DataMetrics(window=4)
    for batch in metrics.timed(slow(batches[:2])):  # steps 1-2: timed
        metrics.update(batch)
    timed_total = metrics.as_dict()["data/wait_seconds/since_start"]
    for batch in batches[2:4]:  # steps 3-4: untimed
        metrics.update(batch)
    got = metrics.as_dict()
    assert [step.wait for step in metrics.recent][2:] == [None, None]
    assert got["data/wait_seconds/since_start"] == timed_total >= 0.1
    assert got["data/wait_seconds"] == pytest.approx(timed_total / 2)  # not / 4
    for batch in batches[4:]:  # steps 5-6 untimed: the timed ones leave the window of 4
        metrics.update(batch)
    got = metrics.as_dict()
    assert got["data/wait_seconds"] == 0.0 and got["data/wait_seconds/since_start"] == timed_total
    assert got["data/steps"] == 6.0
