"""Mixture schedules (packing/schedule.py): a group weight that changes with the step.

The step of a pack is its index on the rank over all the rank's workers (worker w of K
makes w, w+K, ...), so which groups a pack may hold is known from its step alone; that is
what these tests check, for both `mix_by` modes, across a resume at the change point, with
a mandatory group at weight 0, and through an elastic restart's step count.
"""

from __future__ import annotations

import collections
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bagel_data import ConfigError
from bagel_data.checkpoint.merge import _totals
from bagel_data.checkpoint.state import PackState
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.schedule import StepClock, WeightSchedule, check_phases, parse_weight, phases
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.golden import as_worker
from helpers.plans import TOKENS_DICT, text_sample

CHANGE = 12
STAGE_1 = {"und": [[0, 1.0], [CHANGE, 0.5]], "gen": [[0, 0.0], [CHANGE, 0.5]]}


def _config(**changes) -> PackingConfig:
    base = dict(
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
    return PackingConfig(**{**base, **changes})


def _groups(names=("und", "gen"), lengths=None):
    lengths = lengths or {}
    return {
        name: FakeGroup(
            name, lambda i, n=name: text_sample(lengths.get(n, lambda i: 8 + i % 5)(i), index=i, dataset_name=n)
        )
        for name in names
    }


def _weights(raw: dict) -> dict:
    return {name: parse_weight(f"{name}.weight", value) for name, value in raw.items()}


def _names(batch) -> collections.Counter:
    return collections.Counter(where["dataset_name"] for where in batch["batch_data_indexes"])


# -- parsing --------------------------------------------------------------------------------
def test_a_schedule_parses_and_gives_the_weight_from_each_step_on():
    schedule = parse_weight("g.weight", [[0, 1.0], [5000, 0.25], [9000, 0]])
    assert isinstance(schedule, WeightSchedule)
    assert [schedule.at(s) for s in (0, 4999, 5000, 8999, 9000, 10**9)] == [1.0, 1.0, 0.25, 0.25, 0.0, 0.0]
    assert parse_weight("g.weight", 0.3) == 0.3 and parse_weight("g.weight", [[0, 2]]) == 2.0


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ([[5, 1.0]], "start at step 0"),
        ([[0, 1.0], [0, 2.0]], "steps must increase"),
        ([[0, 1.0], [10, -1]], "must be a number >= 0"),
        ([[0, 1.0], [1.5, 1]], "integer >= 0"),
        ([[0, 1.0, 3]], "[step, weight] pair"),
        ([], "list of [step, weight] pairs"),
        ("0.5", "list of [step, weight] pairs"),
        (-0.1, "number >= 0"),
        ([[0, True]], "must be a number"),
    ],
)
def test_a_bad_schedule_is_a_config_error_naming_the_key(value, says):
    with pytest.raises(ConfigError) as error:
        parse_weight("vlm_sft.weight", value)
    assert error.value.key == "vlm_sft.weight" and says in str(error.value)


@given(st.lists(st.tuples(st.integers(0, 10**6), st.floats(0, 10)), min_size=1, max_size=6, unique_by=lambda p: p[0]))
def test_any_increasing_schedule_from_step_0_is_accepted(pairs):
    pairs = sorted([(0, 1.0), *[p for p in pairs if p[0] > 0]])
    schedule = parse_weight("g", [list(p) for p in pairs])
    for step, weight in pairs:
        assert float(schedule.at(step) if isinstance(schedule, WeightSchedule) else schedule) == weight


def test_phases_and_their_sum_are_checked_at_every_change():
    weights = _weights({"a": [[0, 1.0], [100, 0.0]], "b": [[0, 0.0], [200, 1.0]]})
    assert phases(weights) == [(0, {"a": 1.0, "b": 0.0}), (100, {"a": 0.0, "b": 0.0}), (200, {"a": 0.0, "b": 1.0})]
    with pytest.raises(ConfigError, match="from step 100 on"):
        check_phases(weights)


# -- the step and the mixing loop -----------------------------------------------------------
def test_the_step_counts_packs_over_the_ranks_workers():
    clock = StepClock([], worker_id=2, num_workers=4, base=100)
    assert [clock.step(n) for n in range(3)] == [102, 106, 110]
    assert StepClock([], 0, 0).step(5) == 5  # no DataLoader workers: every pack is a step


@pytest.mark.parametrize(
    "worker_id, num_workers, base, first_of_phase",
    [
        (0, 0, 0, [5, 9]),  # steps 0, 1, 2, ...: the packs at steps 5 and 9
        (1, 3, 0, [2, 3]),  # steps 1, 4, 7, 10: 7 is the first at or past 5, 10 past 9
        (0, 2, 4, [1, 3]),  # steps 4, 6, 8, 10: after an elastic restart at step 4
        (2, 4, 5, [1]),  # steps 7, 11, 15: starts inside the second phase, the third from pack 1
    ],
)
def test_a_phase_change_is_seen_at_the_first_pack_at_or_past_it(worker_id, num_workers, base, first_of_phase):
    """The token counts `mix_by: tokens` steers by restart exactly there, not a pack early
    or late, and never at a stream's first pack (its counts start at zero anyway)."""
    clock = StepClock([WeightSchedule((0, 5, 9), (1.0, 0.5, 0.25))], worker_id, num_workers, base)
    assert [packs for packs in range(12) if clock.phase_changed(packs)] == first_of_phase


@pytest.mark.parametrize("mix_by", ["samples", "tokens"])
@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_each_pack_holds_the_groups_of_its_step(mix_by, num_workers):
    cfg = _config(mix_by=mix_by)
    for worker in range(max(num_workers, 1)):
        with as_worker(worker if num_workers else None, num_workers):
            dataset = packed_groups(_groups(), cfg, TOKENS_DICT, weights=_weights(STAGE_1), num_workers=num_workers)
            batches = list(itertools.islice(iter(dataset), CHANGE + 8))
        stride = max(num_workers, 1)
        for n, batch in enumerate(batches):
            step = worker + n * stride
            names = _names(batch)
            if step < CHANGE:
                assert set(names) == {"und"}, (worker, n, step, names)
        late = sum(
            (_names(b) for n, b in enumerate(batches) if worker + n * stride >= CHANGE + stride), collections.Counter()
        )
        assert late["gen"] > 0 and late["und"] > 0


def test_token_shares_meet_each_phase_target():
    """mix_by=tokens starts each phase's counts afresh: a group joining late is not drawn
    alone until it has made up for the steps before it joined."""
    cfg = _config(mix_by="tokens")
    weights = _weights({"und": [[0, 1.0], [40, 0.75]], "gen": [[0, 0.0], [40, 0.25]]})
    lengths = {"und": lambda i: 5 + i % 7, "gen": lambda i: 20 + i % 11}
    batches = list(
        itertools.islice(iter(packed_groups(_groups(lengths=lengths), cfg, TOKENS_DICT, weights=weights)), 200)
    )
    tokens = collections.Counter()
    for n, batch in enumerate(batches[41:], start=41):
        for where, length in zip(batch["batch_data_indexes"], batch["sample_lens"]):
            tokens[where["dataset_name"]] += length
        if n == 45:
            assert _names(batch)["und"] > 0, "the old group is still drawn right after the change"
    assert abs(tokens["gen"] / sum(tokens.values()) - 0.25) < 0.02


def test_a_mandatory_group_at_weight_0_still_opens_every_pack():
    weights = _weights({"m": [[0, 1.0], [5, 0.0]], "g": [[0, 0.0], [5, 1.0]]})
    dataset = packed_groups(
        _groups(("m", "g")), _config(), TOKENS_DICT, weights=weights, mandatory={"m": True, "g": False}
    )
    batches = list(itertools.islice(iter(dataset), 12))
    for n, batch in enumerate(batches):
        assert batch["batch_data_indexes"][0]["dataset_name"] == "m"
        if n >= 6:
            assert _names(batch)["m"] == 1  # only its mandatory sample
        if n < 5:
            assert set(_names(batch)) == {"m"}


@pytest.mark.parametrize("mix_by", ["samples", "tokens"])
@pytest.mark.parametrize("cut", [CHANGE - 1, CHANGE, CHANGE + 1])
def test_resume_is_exact_across_the_change(mix_by, cut):
    cfg = _config(mix_by=mix_by)
    full = list(itertools.islice(iter(packed_groups(_groups(), cfg, TOKENS_DICT, weights=_weights(STAGE_1))), 30))
    first = packed_groups(_groups(), cfg, TOKENS_DICT, weights=_weights(STAGE_1))
    head = list(itertools.islice(iter(first), cut))
    resumed = packed_groups(_groups(), cfg, TOKENS_DICT, weights=_weights(STAGE_1))
    resumed.load_state_dict(first.state_dict())
    tail = list(itertools.islice(iter(resumed), 30 - cut))
    assert [b["batch_data_indexes"] for b in full] == [b["batch_data_indexes"] for b in head + tail]


def test_an_elastic_restart_goes_on_from_the_step_the_old_run_reached():
    """Old run: 2 ranks x 2 workers; rank 0's workers made 7 + 6 packs, rank 1's 6 + 7."""

    def state(rank, worker, packs, history=None):
        topology = {"rank": rank, "world_size": 2, "worker_id": worker, "num_workers": 2}
        return {"topology": topology, "packs": packs, "tokens": 0, "samples": {}, "skips": {}, "history": history}

    old = [state(0, 0, 7), state(0, 1, 6), state(1, 0, 6), state(1, 1, 7)]
    history = _totals(old)
    assert history["steps"] == 13
    again = _totals([state(0, 0, 4, history), state(0, 1, 4, history)])  # a second restart, 1 x 2
    assert again["steps"] == 21
    restarted = PackState(None, 0, [1], None, [], {}, history=again)  # type: ignore[arg-type]
    clock = StepClock([], worker_id=1, num_workers=3, base=restarted.step_base)
    assert [clock.step(n) for n in range(2)] == [22, 25]


def test_a_schedule_reads_as_its_step_0_weight_where_a_number_is_expected():
    schedule = parse_weight("weight", [[0, 0.25], [10, 0.75]])
    assert isinstance(schedule, WeightSchedule) and float(schedule) == 0.25


def test_a_plain_weight_as_a_schedule_starts_at_step_0():
    from bagel_data.schema.weights import as_schedule

    assert as_schedule(0.5).as_list() == [[0, 0.5]]
    schedule = parse_weight("weight", [[0, 0.0], [4, 1.0]])
    assert as_schedule(schedule) is schedule
