"""Pins of the stage pacer (packing/pacing.py) and best fit at their edges: the backlog's
oldest-first rule and the pace horizon to the token, pacing with CFG dropout on, a backlog
sample skipped, a second schedule change, best fit whose every sample dropout empties, and
best fit with `max_buffer_size: 0` beside a mandatory group. Each fails when the behaviour
it names breaks."""

from __future__ import annotations

import collections
import copy
import itertools
import sys
from pathlib import Path

import pytest

from bagel_data import ResumeError
from bagel_data.errors import EmptyWorkerError, SkipReason
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.pacing import PaceState, StagePacer
from bagel_data.packing.packed_dataset import PackedDataset
from bagel_data.packing.schedule import parse_weight
from bagel_data.sample import Draw
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.golden import as_worker
from helpers.plans import TOKENS_DICT, make_sample, text_item, text_sample
from helpers.resume import check_save_load_at

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_pacing import STAGES, SWITCH, TARGETS, WORKERS, _config


# -- the pacer alone ---------------------------------------------------------------------
def _pacer(
    lengths: list[tuple[int, int]], backlog: int, weights, packed=(0, 0), max_tokens: int = 400, readable=lambda d: True
):
    """A pacer over a buffer of (group, length) samples, the first `backlog` of them the backlog;
    `readable(draw)` False: the draw's row became a skip when rebuilt."""
    buffer = collections.deque(Draw(g, (i,), text_sample(n, index=i)) for i, (g, n) in enumerate(lengths))
    pace = PaceState(["a", "b"], 50)
    pace.backlog, pace.packed_tokens = backlog, list(packed)
    config = _config("best_fit", max_num_tokens=max_tokens, expected_num_tokens=max_tokens - 20)

    def remove(index):
        draw = buffer[index]
        del buffer[index]
        return draw

    return StagePacer(pace, lambda: buffer, config, weights, True, _Choice(), readable, remove), buffer


class _Choice:
    def released(self, group, tokens):
        pass

    def new_phase(self):
        pass


def test_a_backlog_group_waits_oldest_first():
    """Group a may fill 200 of the 400-token horizon: its oldest sample (210) does not fit,
    so the shorter ones behind it wait too; group b (not paced) is free."""
    pacer, _ = _pacer([(0, 210), (0, 10), (1, 30), (0, 10)], backlog=2, weights=[0.5, 0.5])
    assert pacer.eligible(0) == [2]
    assert pacer.first_eligible(0) == 2


def test_the_pace_horizon_counts_this_pack_at_max_num_tokens():
    """At the phase's start a group of weight 0.5 may take 0.5 * (0 + 400) = 200 tokens: a
    sample of 200 goes in, one of 201 waits. After 1000 tokens packed (600 of them a's), the
    horizon is 1000 + 400 (this pack's 100 already in it left out): 0.5 * 1300 - 600 = 50."""
    assert _pacer([(0, 200)], 1, [0.5, 0.5])[0].eligible(0) == [0]
    assert _pacer([(0, 201)], 1, [0.5, 0.5])[0].eligible(0) == []
    assert _pacer([(0, 50)], 1, [0.5, 0.5], packed=(600, 400))[0].eligible(100) == [0]
    assert _pacer([(0, 51)], 1, [0.5, 0.5], packed=(600, 400))[0].eligible(100) == []


def test_taking_from_the_backlog_releases_it_once():
    pacer, buffer = _pacer([(0, 20), (0, 20), (1, 20)], backlog=2, weights=[0.5, 0.5])
    taken = pacer.remove([0, 2])
    assert [d.cursor for d in taken] == [(0,), (2,)] and [d.cursor for d in buffer] == [(1,)]
    assert pacer.pace.backlog == 1  # one of the two taken was the backlog's


def test_a_restored_backlog_sample_that_became_a_skip_leaves_the_backlog_count():
    """Rebuilt on resume, a backlog sample whose row is gone leaves the buffer and the backlog
    count with it; a fresh one that is gone leaves the count alone."""
    pacer, buffer = _pacer(
        [(0, 20), (0, 20), (1, 20), (1, 20)], 2, [0.5, 0.5], readable=lambda d: d.cursor[0] in (1, 2)
    )
    assert pacer.eligible(0) == [0, 1]
    assert [d.cursor for d in buffer] == [(1,), (2,)] and pacer.pace.backlog == 1


@pytest.mark.parametrize(
    "backlog, buffered, packed, error",
    [(4, 8, 100, None), (5, 8, 100, "stages.pace.backlog"), (4, 3, 100, "stages.pace.backlog"),
     (0, 4, 100, None), (0, 5, 100, "buffer = 5 entries"), (1, 5, 101, "packed_tokens = 101")],
)  # fmt: skip
def test_a_loaded_pace_state_is_checked_against_its_buffer_and_tokens(backlog, buffered, packed, error):
    """A backlog of at most max_buffer_size (4) and the buffer's length, at most
    max_buffer_size fresh samples beside it, and the phase's tokens within the stream's (100):
    each limit itself loads, one past it is refused naming the field."""
    pace = PaceState(["a", "b"], 4)
    saved = {"backlog": backlog, "packed_tokens": {"a": packed - 40, "b": 40}}
    worker = {"stages": {"overflow": {"buffer": [None] * buffered}}, "tokens": 100}
    if error is None:
        pace.load_state_dict(saved, worker)
        assert (pace.backlog, pace.packed_tokens) == (backlog, [packed - 40, 40])
    else:
        with pytest.raises(ResumeError, match=error):
            pace.load_state_dict(saved, worker)


# -- pacing with dropout on, and a backlog sample skipped ----------------------------------
def _cfg_sample(length: int, index: int, name: str) -> dict:
    """A caption (CFG on, dropout may drop it) and a supervised answer: `length` tokens whole."""
    caption = [1000 + k % 97 for k in range(max(length // 2 - 2, 1))]
    answer = [2000 + k % 97 for k in range(max(length - len(caption) - 4, 1))]
    items = [text_item(caption, cfg=True), text_item(answer, loss=True)]
    return make_sample(items, index=index, dataset_name=name)


def _paced(strategy: str, maker, stages=STAGES, mandatory=None, rank=1, **changes) -> tuple[PackedDataset, dict]:
    lengths = {
        "vlm": lambda i: 20 + (i * 7) % 41,
        "t2i": lambda i: 10 + (i * 5) % 23,
        "edit": lambda i: 30 + (i * 3) % 37,
    }
    groups = {name: FakeGroup(name, lambda i, n=name: maker(lengths.get(n, lambda i: 20)(i), i, n)) for name in stages}
    dataset = PackedDataset.from_groups(
        groups,
        _config(strategy, **changes),
        TOKENS_DICT,
        weights={name: parse_weight(name, value) for name, value in stages.items()},
        mandatory={name: name in (mandatory or ()) for name in stages},
        local_rank=rank,
        world_size=2,
        num_workers=WORKERS,
        data_seed=3,
    )
    return dataset, groups


def _waiting(state: dict) -> collections.Counter:
    held = [
        *state["stages"]["overflow"]["buffer"],
        *([state["stages"]["overflow"]["carry"]] if state["stages"]["overflow"]["carry"] else []),
    ]
    return collections.Counter((raw["group"], raw["cursor"][0]) for raw in held)


@pytest.mark.parametrize("strategy", ["greedy", "best_fit"])
def test_pacing_with_dropout_on_meets_the_new_shares_and_packs_each_row_once(strategy):
    """Issue 40's measure with CFG dropout on (lengths after dropout are what is paced): over
    steps switch+5 .. switch+15 of 2 ranks x 2 workers each group's token share is within 3
    points of its target; every row drawn is packed once or still waits."""
    steps: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    dropped = 0
    for rank, worker in itertools.product(range(2), range(WORKERS)):
        dataset, groups = _paced(strategy, _cfg_sample, rank=rank, text_cond_dropout_prob=0.5)
        packed: collections.Counter = collections.Counter()
        with as_worker(worker, WORKERS):
            for n, batch in enumerate(itertools.islice(iter(dataset), 30)):
                packed.update((w["dataset_name"], w["data_indexes"]) for w in batch["batch_data_indexes"])
                for where, length in zip(batch["batch_data_indexes"], batch["sample_lens"]):
                    steps[worker + WORKERS * n][where["dataset_name"]] += length
                    dropped += length < _cfg_length(groups, where)
            state = dataset.state_dict()
        drawn = collections.Counter((name, i) for name, group in groups.items() for i in group.drawn)
        assert packed + _waiting(state) == drawn
        assert max((packed + _waiting(state)).values()) == 1
    assert dropped > 50, "dropout shortened samples: the test tests pacing on their packed lengths"
    window = sum((steps[step] for step in range(SWITCH + 5, SWITCH + 16)), collections.Counter())
    shares = {name: window[name] / sum(window.values()) for name in TARGETS}
    assert all(abs(shares[name] - TARGETS[name]) <= 0.03 for name in TARGETS), shares


def _cfg_length(groups, where) -> int:
    sample = groups[where["dataset_name"]].make(where["data_indexes"])
    return sample["num_tokens"] + 2 * len(sample["sequence_plan"])


def test_a_backlog_sample_skipped_leaves_the_backlog_and_its_count():
    """A mandatory group's samples grow after the switch, so backlog samples of VLM that no
    longer fit beside them are skipped (counted) after waiting: the backlog shrinks with
    each, never past the buffer, every checkpoint resumes, and none is lost or doubled."""

    def maker(length, i, name):
        if name == "m":
            return text_sample(12 if i < SWITCH // WORKERS else 350, index=i, dataset_name=name)
        return text_sample(length, index=i, dataset_name=name)

    stages = {**STAGES, "m": [[0, 0.0]]}
    changes = dict(mandatory=("m",), max_buffer_size=8, max_num_tokens_per_sample=390)
    make = lambda: _paced("best_fit", maker, stages, **changes)[0]  # noqa: E731
    dataset, groups = _paced("best_fit", maker, stages, **changes)
    packed: collections.Counter = collections.Counter()
    first_backlog: set | None = None  # the buffer's front at the change: only it is the backlog
    names = list(stages)
    with as_worker(1, WORKERS):
        for batch in itertools.islice(iter(dataset), 40):
            packed.update((w["dataset_name"], w["data_indexes"]) for w in batch["batch_data_indexes"])
            state = dataset.state_dict()
            backlog = state["stages"]["pace"]["backlog"]
            assert 0 <= backlog <= len(state["stages"]["overflow"]["buffer"])
            front = {(raw["group"], tuple(raw["cursor"])) for raw in state["stages"]["overflow"]["buffer"][:backlog]}
            first_backlog = front if first_backlog is None and backlog else first_backlog
            assert front <= (first_backlog or set()), "a sample drawn since counted as the backlog's"
            # What the group choice steers by: each group's tokens packed in the phase and its
            # samples drawn in it that wait (a skip takes its tokens back, a release adds them).
            waiting: collections.Counter = collections.Counter()
            for raw in state["stages"]["overflow"]["buffer"][backlog:]:
                name = raw["group"]
                waiting[name] += _cfg_length(groups, {"dataset_name": name, "data_indexes": raw["cursor"][0]})
            paced = state["stages"]["pace"]["packed_tokens"]
            assert state["stages"]["choose"]["group_tokens"] == {n: paced[n] + waiting[n] for n in names}
        check_save_load_at(make, cuts=[SWITCH // WORKERS + 2, SWITCH // WORKERS + 6], total=30)
    skipped = state["skips"]["vlm"].get(SkipReason.NO_ROOM_BESIDE_MANDATORY.value, 0)
    assert skipped >= 1, "a backlog sample was skipped: the test tests its count"
    assert state["stages"]["pace"]["backlog"] == 0
    drawn = collections.Counter((name, i) for name, group in groups.items() for i in group.drawn)
    assert sum((packed + _waiting(state)).values()) + sum(
        sum(counts.values()) for counts in state["skips"].values()
    ) == sum(drawn.values())
    assert max((packed + _waiting(state)).values()) == 1


# -- a second schedule change ------------------------------------------------------------
def test_a_checkpoint_right_after_a_second_change_resumes():
    """Two changes two steps apart, the first backlog still draining at the second: every
    checkpoint stays within what a resume accepts (a backlog and a look-ahead of at most
    max_buffer_size each) and resumes exactly, before, at and after the second change."""
    second = SWITCH + 4
    stages = {
        "vlm": [[0, 1.0], [SWITCH, 0.2], [second, 0.0]],
        "t2i": [[0, 0.0], [SWITCH, 0.5], [second, 0.5]],
        "edit": [[0, 0.0], [SWITCH, 0.3], [second, 0.5]],
    }
    make = lambda: _paced("best_fit", lambda n, i, name: text_sample(n, i, name), stages, max_buffer_size=8)[0]  # noqa: E731
    backlogs = []
    with as_worker(1, WORKERS):
        dataset = make()
        for _ in itertools.islice(iter(dataset), 24):
            state = dataset.state_dict()
            backlog = state["stages"]["pace"]["backlog"]
            assert backlog <= 8 and len(state["stages"]["overflow"]["buffer"]) - backlog <= 8
            backlogs.append(backlog)
        cuts = [second // WORKERS - 1, second // WORKERS, second // WORKERS + 1]
        check_save_load_at(make, cuts=cuts, total=24)
    assert backlogs[second // WORKERS - 1] > 0, "the first backlog still drains at the second change"


def test_a_new_backlog_is_capped_at_max_buffer_size():
    """At a change point with more waiting than max_buffer_size (an earlier backlog and a
    full look-ahead), the oldest max_buffer_size are the new backlog and the rest count as
    look-ahead: the checkpoint stays within what a resume accepts."""
    pacer, _ = _pacer([(0, 20)] * 12, backlog=5, weights=[0.5, 0.5])
    pacer.pace.max_buffer = 8
    pacer.start_phase()
    assert pacer.pace.backlog == 8 and pacer.fresh() == 4


# -- best fit at its edges ---------------------------------------------------------------
def test_best_fit_raises_when_dropout_empties_every_sample():
    cfg = PackingConfig(
        expected_num_tokens=90, max_num_tokens=100, max_num_tokens_per_sample=80, pack_strategy="best_fit",
        text_cond_dropout_prob=1.0, vit_cond_dropout_prob=0.0, vae_cond_dropout_prob=0.0,
    )  # fmt: skip
    group = FakeGroup(
        "cfg", lambda i: make_sample([text_item([5] * 20, cfg=True, loss=True)], index=i, dataset_name="cfg")
    )
    with pytest.raises(EmptyWorkerError, match="lost every item to CFG dropout"):
        next(iter(packed_groups({"cfg": group}, cfg, TOKENS_DICT)))


def test_best_fit_with_no_buffer_beside_a_mandatory_group_resumes_from_every_checkpoint():
    cfg = PackingConfig(
        expected_num_tokens=90, max_num_tokens=100, max_num_tokens_per_sample=80, prefer_buffer_before=40,
        max_buffer_size=0, pack_strategy="best_fit",
    )  # fmt: skip

    def make():
        groups = {
            "a": FakeGroup("a", lambda i: text_sample(10 + (i * 37) % 70, index=i, dataset_name="a")),
            "m": FakeGroup("m", lambda i: text_sample(10 + (i * 53) % 70, index=i, dataset_name="m")),
        }
        return packed_groups(groups, cfg, TOKENS_DICT, weights={"a": 1.0, "m": 1.0}, mandatory={"a": False, "m": True})

    dataset = make()
    waiting = []
    for n, _ in enumerate(itertools.islice(iter(dataset), 26)):
        if dataset.state_dict()["stages"]["overflow"]["buffer"]:
            waiting.append(n + 1)
    assert len(waiting) >= 3, "samples waited: the test tests a buffer of one"
    taken = check_save_load_at(make, cuts=waiting[:6], total=28)
    tampered = copy.deepcopy(taken[-1])
    tampered["stages"]["pace"]["backlog"] = 2
    resumed = make()
    resumed.load_state_dict(tampered)
    with pytest.raises(ResumeError, match="stages.pace.backlog"):
        next(iter(resumed))
