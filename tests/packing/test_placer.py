"""Where the placer (packing/placer.py) puts a draw, at its edges: the look-ahead kept beside
a draining backlog (greedy's overflow, best fit's top-up), the per-sample budget checked on
the full length before dropout and named so, a run of samples emptied by dropout that a kept
sample ends, and compat's phase tokens counted as what went into the pack."""

from __future__ import annotations

import itertools
import logging
import sys
from pathlib import Path

import pytest

from bagel_data.compat import CompatPolicy
from bagel_data.errors import SkipReason
from bagel_data.packing import placer
from bagel_data.packing.config import PackingConfig
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.golden import as_worker
from helpers.plans import TOKENS_DICT, make_sample, text_item, text_sample

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_pacing import SWITCH, WORKERS, _dataset


@pytest.mark.parametrize("strategy", ["greedy", "best_fit"])
def test_a_draining_backlog_keeps_a_full_look_ahead_beside_it(strategy, monkeypatch):
    """While the backlog drains, up to max_buffer_size fresh samples wait beside it (greedy's
    overflow, best fit's top-up): the buffer then holds more than max_buffer_size."""
    seen = []
    has_room, top_up = placer.Placer.has_room, placer.Placer.top_up

    def seen_has_room(self):
        room = has_room(self)
        seen.append((self.pace.backlog, len(self.held.buffer), room))
        return room

    def seen_top_up(self):
        top_up(self)
        seen.append((self.pace.backlog, len(self.held.buffer), None))

    monkeypatch.setattr(placer.Placer, "has_room", seen_has_room)
    monkeypatch.setattr(placer.Placer, "top_up", seen_top_up)
    dataset, _ = _dataset(strategy, 1, 1, max_buffer_size=8)
    with as_worker(1, WORKERS):
        list(itertools.islice(iter(dataset), SWITCH // WORKERS + 8))
    draining = [(backlog, held, room) for backlog, held, room in seen if backlog]
    assert draining and all(held <= backlog + 8 for backlog, held, _ in draining)
    if strategy == "best_fit":  # every top-up fills the look-ahead
        assert all(held == backlog + 8 for backlog, held, _ in draining), draining
    else:  # the overflow is held while fewer than 8 fresh samples wait, whatever the backlog
        assert all(room == (held - backlog < 8) for backlog, held, room in draining), draining
        assert any(room and held >= 8 for _, held, room in draining), draining


def _cfg_sample(caption: int, answer: int, index: int, name: str = "a") -> dict:
    items = [text_item([1000 + k % 97 for k in range(caption)], cfg=True)] if caption else []
    items.append(text_item([2000 + k % 97 for k in range(answer)], loss=True))
    return make_sample(items, index=index, dataset_name=name)


def _config(strategy: str = "greedy", **changes) -> PackingConfig:
    base = dict(
        expected_num_tokens=90, max_num_tokens=100, max_num_tokens_per_sample=50, pack_strategy=strategy,
        vit_cond_dropout_prob=0.0, vae_cond_dropout_prob=0.0,
    )  # fmt: skip
    return PackingConfig(**{**base, **changes})


@pytest.mark.parametrize("strategy", ["greedy", "best_fit"])
def test_the_per_sample_budget_is_held_against_the_length_before_dropout(strategy, caplog):
    """Sample 1 is 60 tokens whole and 22 once its caption is dropped: over the budget of 50
    whatever the dropout (what `validate` predicts), skipped and named with its full length."""

    def make(i):
        return _cfg_sample(36 if i == 1 else 0, 20, i)

    config = _config(strategy, text_cond_dropout_prob=1.0)
    dataset = packed_groups({"a": FakeGroup("a", make)}, config, TOKENS_DICT)
    with caplog.at_level(logging.WARNING):
        batches = list(itertools.islice(iter(dataset), 3))
    packed = [w["data_indexes"] for batch in batches for w in batch["batch_data_indexes"]]
    assert 1 not in packed and 2 in packed
    assert dataset.state_dict()["skips"]["a"] == {SkipReason.OVER_SAMPLE_BUDGET.value: 1}
    assert "60 tokens do not fit max_num_tokens_per_sample=50" in caplog.text


@pytest.mark.parametrize("strategy", ["greedy", "best_fit"])
def test_a_kept_sample_ends_a_run_of_samples_dropout_emptied(strategy, monkeypatch):
    """Every other sample is all-CFG and loses every item: the runs are one long, so the
    bound on a run (3 here) is never met, however many such samples there are in all."""
    monkeypatch.setattr(placer, "MAX_EMPTY_RUN", 3)

    def make(i):
        if i % 2:
            return make_sample([text_item([5] * 20, cfg=True, loss=True)], index=i, dataset_name="a")
        return text_sample(20, index=i, dataset_name="a")

    dataset = packed_groups({"a": FakeGroup("a", make)}, _config(strategy, text_cond_dropout_prob=1.0), TOKENS_DICT)
    list(itertools.islice(iter(dataset), 6))
    assert dataset.state_dict()["skips"]["a"][SkipReason.CFG_DROPPED_ALL.value] > 3


def test_compat_s_phase_tokens_are_what_went_into_the_packs():
    """compat="bagel" drops CFG items while packing: the phase's packed tokens count what went
    in, so they stay within the stream's tokens, as a resume checks."""

    def make(i):
        return _cfg_sample(10 + i % 7, 12, i)

    config = _config(text_cond_dropout_prob=0.5, max_num_tokens_per_sample=60)
    dataset = packed_groups({"a": FakeGroup("a", make)}, config, TOKENS_DICT, policy=CompatPolicy.of("bagel"))
    list(itertools.islice(iter(dataset), 8))
    state = dataset.state_dict()
    assert sum(state["stages"]["pace"]["packed_tokens"].values()) == state["tokens"]


def test_a_pack_reopened_at_a_change_point_starts_the_phase_once():
    """An empty pack reopens at the same pack count (its samples were skipped or emptied):
    the phase it opened is not started again, so what was drawn for it since stays out of
    the backlog and in the group choice's counts."""
    import types

    from bagel_data.packing.choosers import TokenShares
    from bagel_data.packing.overflow import OverflowState
    from bagel_data.packing.pacing import PaceState
    from bagel_data.packing.schedule import StepClock, parse_weight
    from bagel_data.sample import Draw

    state = types.SimpleNamespace(packs=0, rng=None)
    held = OverflowState(["a", "b"])
    schedules = [parse_weight("a", [[0, 1.0], [2, 0.5]]), parse_weight("b", [[0, 0.0], [2, 0.5]])]
    choice = TokenShares(["a", "b"])
    placing = placer.Placer(
        groups=[], mandatory=[False, False], config=_config(mix_by="tokens", max_buffer_size=4),
        policy=CompatPolicy.of(None), state=state, draw=types.SimpleNamespace(decide=lambda draw: None),  # type: ignore[arg-type]
        held=held, choice=choice, pace=PaceState(["a", "b"], 4), clock=StepClock(schedules, 0, 1), weights=[1.0, 0.0],
        new_pack=lambda: None,  # type: ignore[arg-type,return-value]
    )  # fmt: skip
    state.packs = 2  # the first pack of the second phase
    held.buffer.extend(Draw(0, (i,), text_sample(20, index=i, dataset_name="a")) for i in range(3))
    placing.enter_step()
    assert placing.pace.backlog == 3 and placing.weights == [0.5, 0.5]
    held.buffer.append(Draw(1, (0,), text_sample(20, dataset_name="b")))  # drawn for the open pack
    choice.drawn(1, 20)
    placing.enter_step()  # the pack came out empty and reopens
    assert placing.pace.backlog == 3 and choice.tokens == [0, 20]
