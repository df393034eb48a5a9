"""The opt-in packing modes: token-share mixing and best-fit packs (packing/strategies.py).

Expectations here come from properties that hold whatever the implementation: a pack
never exceeds `max_num_tokens`, every drawn sample is packed, waiting or counted as
skipped exactly once, the buffer keeps its bound, realized token shares approach the
targets, and a resumed stream equals the uninterrupted one.
"""

from __future__ import annotations

import collections
import itertools
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bagel_data import ConfigError
from bagel_data.checkpoint.state import BufferEntry
from bagel_data.errors import SkipReason
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.invariants import check_batch
from bagel_data.packing.packed_dataset import PackedDataset
from bagel_data.packing.strategies import best_subset, choose_by_deficit, choose_by_weight
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.plans import TOKENS, TOKENS_DICT, text_sample


def _config(**changes) -> PackingConfig:
    base = dict(
        expected_num_tokens=180,
        max_num_tokens=200,
        max_num_tokens_per_sample=120,
        prefer_buffer_before=100,
        max_buffer_size=6,
        use_flex=True,
        text_cond_dropout_prob=0.0,
        vit_cond_dropout_prob=0.0,
        vae_cond_dropout_prob=0.0,
    )
    return PackingConfig(**{**base, **changes})


def _packed(groups: dict, cfg: PackingConfig, weights: dict, mandatory=None, seed: int = 5) -> PackedDataset:
    dataset = packed_groups(groups, cfg, TOKENS_DICT, weights=weights, mandatory=mandatory, seed=seed)
    dataset.set_epoch(seed)
    return dataset


def _group(name: str, lengths):
    return FakeGroup(name, lambda i: text_sample(lengths(i), index=i, dataset_name=name))


def _lengths(seed: int, low: int, high: int):
    table = np.random.default_rng(seed).integers(low, high + 1, size=100_000)
    return lambda i: int(table[i])


def _positions(batches, name):
    return [d["data_indexes"] for b in batches for d in b["batch_data_indexes"] if d["dataset_name"] == name]


# -- the pure helpers -----------------------------------------------------------------------
@given(st.lists(st.integers(1, 60), max_size=10), st.integers(0, 200))
def test_best_subset_is_the_fullest_that_fits(lengths, room):
    """Checked against every subset (at most 2**10 of them)."""
    chosen = best_subset(lengths, room)
    assert chosen == sorted(set(chosen))
    total = sum(lengths[i] for i in chosen)
    best = max(
        (sum(c) for k in range(len(lengths) + 1) for c in itertools.combinations(lengths, k) if sum(c) <= room),
        default=0,
    )
    assert total == best


def test_deficit_choice_goes_to_the_group_furthest_below_its_share():
    rng = np.random.default_rng(0)
    assert choose_by_deficit([1, 1, 2], [100, 50, 250], rng) == 1  # targets 100 / 100 / 200
    assert choose_by_deficit([1, 0, 1], [500, 0, 100], rng) == 2  # weight 0 is never drawn
    first_draws = {choose_by_deficit([1, 1, 1], [0, 0, 0], np.random.default_rng(s)) for s in range(40)}
    assert first_draws == {0, 1, 2}, "a tie is broken at random, not by config order"


@pytest.mark.parametrize(
    "weights, tokens",
    [
        # Packed-token counts at their targets, where float rounding leaves every positive
        # group's deficit just below 0 (-2.4e-4, -9.8e-4 in the first case).
        ([0, 0.7, 3], [0, 1789817957690, 7670648390100]),
        ([2, 0.7, 1, 0], [3856117351400, 1349641072990, 1928058675700, 0]),
        ([0.3, 0, 1], [124241227653, 0, 414137425510]),
    ],
)
def test_a_zero_weight_group_is_never_drawn_even_at_large_counts(weights, tokens):
    total_weight, total = sum(weights), sum(tokens)
    rounded = [w / total_weight * total - count for w, count in zip(weights, tokens) if w > 0]
    assert max(rounded) < 0, "the case exercises the rounding it is about"
    zero = weights.index(0)
    draws = {choose_by_deficit(weights, tokens, np.random.default_rng(seed)) for seed in range(20)}
    assert zero not in draws and draws <= {g for g, w in enumerate(weights) if w > 0}


@pytest.mark.parametrize("key, value", [("mix_by", "token"), ("pack_strategy", "bestfit")])
def test_an_unknown_mode_is_a_config_error(key, value):
    with pytest.raises(ConfigError, match=key):
        _config(**{key: value})


# -- token shares ---------------------------------------------------------------------------
SHARE_GROUPS = {"short": (4, 20), "medium": (20, 60), "long": (60, 110)}


def _realized_shares(mix_by: str, packs: int, weights: dict) -> dict:
    groups = {name: _group(name, _lengths(k, *SHARE_GROUPS[name])) for k, name in enumerate(SHARE_GROUPS)}
    dataset = _packed(groups, _config(mix_by=mix_by), weights)
    tokens = collections.Counter()
    for batch in itertools.islice(iter(dataset), packs):
        for where, length in zip(batch["batch_data_indexes"], batch["sample_lens"]):
            tokens[where["dataset_name"]] += length
    total = sum(tokens.values())
    return {name: tokens[name] / total for name in weights}


@pytest.mark.parametrize("weights", [{"short": 1, "medium": 1, "long": 1}, {"short": 5, "medium": 3, "long": 2}])
def test_token_shares_converge_to_the_weights(weights):
    """Over 1,000 packs each group's share of packed tokens is within 1 point of its weight
    share, although the groups' samples differ in length by up to 25x; mixing by samples
    with the same weights is far from it."""
    targets = {name: weight / sum(weights.values()) for name, weight in weights.items()}
    by_tokens = _realized_shares("tokens", 1000, weights)
    for name, target in targets.items():
        assert abs(by_tokens[name] - target) < 0.01, (name, by_tokens, targets)
    by_samples = _realized_shares("samples", 300, weights)
    assert max(abs(by_samples[name] - targets[name]) for name in targets) > 0.05, by_samples


# -- best fit -------------------------------------------------------------------------------
def _run(cfg: PackingConfig, lengths, packs: int, mandatory_length=None):
    groups = {"g": _group("g", lengths)}
    weights, mandatory = {"g": 1.0}, {"g": False}
    if mandatory_length is not None:
        groups["m"] = _group("m", lambda i: mandatory_length)
        weights["m"], mandatory["m"] = 0.0, True
    dataset = _packed(groups, cfg, weights, mandatory)
    batches = list(itertools.islice(iter(dataset), packs))
    return dataset, groups, batches


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    low=st.integers(2, 40),
    spread=st.integers(0, 140),
    max_tokens=st.integers(150, 400),
    buffer=st.integers(0, 8),
    mandatory=st.sampled_from([None, 12]),
)
def test_best_fit_keeps_every_invariant(seed, low, spread, max_tokens, buffer, mandatory):
    cfg = _config(
        max_num_tokens=max_tokens,
        expected_num_tokens=max_tokens * 9 // 10,
        max_num_tokens_per_sample=min(120, max_tokens - 20),
        prefer_buffer_before=max_tokens // 2,
        max_buffer_size=buffer,
        pack_strategy="best_fit",
    )
    lengths = _lengths(seed, low, low + spread)
    dataset, groups, batches = _run(cfg, lengths, 25, mandatory)
    for batch in batches:
        check_batch(batch, cfg, TOKENS)  # no pack over max_num_tokens, a well-formed batch
    state = dataset.state_dict()
    assert len(state["stages"]["overflow"]["buffer"]) <= cfg.max_buffer_size
    # Conservation: each drawn sample is packed once, waiting, or over the per-sample budget.
    drawn = groups["g"].drawn
    packed = collections.Counter(_positions(batches, "g"))
    assert all(count == 1 for count in packed.values()), "a sample was packed twice"
    held = [
        BufferEntry.read(raw)
        for raw in state["stages"]["overflow"]["buffer"]
        + ([state["stages"]["overflow"]["carry"]] if state["stages"]["overflow"]["carry"] else [])
    ]
    waiting = {entry.cursor[0] for entry in held if entry.group == "g"}
    too_long = {i for i in drawn if lengths(i) > cfg.max_num_tokens_per_sample}
    beside_mandatory = {i for i in drawn if mandatory and lengths(i) + mandatory > cfg.max_num_tokens}
    lost = set(drawn) - set(packed) - waiting
    assert lost <= too_long | beside_mandatory, sorted(lost)
    assert not (waiting & set(packed))


def _mean_fill(batches, cfg) -> float:
    return float(np.mean([sum(b["sample_lens"][:-1]) / cfg.max_num_tokens for b in batches]))


def test_best_fit_fills_packs_closer_to_the_budget_than_greedy():
    lengths = _lengths(3, 5, 110)
    greedy = _config(max_buffer_size=10)
    best = _config(max_buffer_size=10, pack_strategy="best_fit")
    _, _, greedy_batches = _run(greedy, lengths, 200)
    _, _, best_batches = _run(best, lengths, 200)
    assert _mean_fill(best_batches, best) >= 0.98
    assert _mean_fill(best_batches, best) > _mean_fill(greedy_batches, greedy)


# -- exact resume ---------------------------------------------------------------------------
@pytest.mark.parametrize("mix_by, strategy", [("tokens", "greedy"), ("samples", "best_fit"), ("tokens", "best_fit")])
def test_resume_is_exact_in_every_mode(mix_by, strategy):
    cfg = _config(mix_by=mix_by, pack_strategy=strategy)

    def build():
        groups = {name: _group(name, _lengths(k, *SHARE_GROUPS[name])) for k, name in enumerate(SHARE_GROUPS)}
        return _packed(groups, cfg, {"short": 2, "medium": 1, "long": 1})

    total = 30
    reference = [b["batch_data_indexes"] for b in itertools.islice(iter(build()), total)]
    for cut in (1, 7, 19):
        first = build()
        stream = iter(first)
        for _ in range(cut):
            next(stream)
        saved = pickle.loads(pickle.dumps(first.state_dict()))
        resumed = build()
        resumed.load_state_dict(saved)
        rest = [b["batch_data_indexes"] for b in itertools.islice(iter(resumed), total - cut)]
        assert rest == reference[cut:], f"cut {cut}"


def test_best_fit_looks_ahead_no_further_than_the_buffer():
    """The look-ahead is the buffer: before the first pack closes, exactly `max_buffer_size`
    samples are drawn (none fits beside the oldest here, so none is packed with it)."""
    cfg = _config(max_buffer_size=3, pack_strategy="best_fit", max_num_tokens=100, expected_num_tokens=90)
    _, groups, batches = _run(cfg, lambda i: 60, 1)
    assert [len(b["batch_data_indexes"]) for b in batches] == [1]
    assert len(groups["g"].drawn) == cfg.max_buffer_size


def test_the_weight_rule_takes_the_first_share_strictly_above_u():
    """The reference's group choice: the first group whose cumulative share *exceeds* u."""
    assert choose_by_weight([0.5, 1.0], 0.5) == 1
    assert choose_by_weight([0.5, 1.0], 0.4999) == 0


def test_a_draw_above_every_share_goes_to_the_first_group():
    """The reference computes its shares its own way and may end a hair below 1; a draw
    above the last share goes to group 0, its default index."""
    assert choose_by_weight([0.3, 0.9999999], 0.99999995) == 0


def test_a_clear_deficit_draws_no_randomness():
    """Only a tie consumes the worker's generator, so the dropout and timestep draws that
    follow do not depend on how many groups were compared."""
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    assert choose_by_deficit([1, 1], [0, 100], rng) == 0
    assert rng.bit_generator.state == before


def test_no_room_or_less_chooses_nothing():
    """Mandatory samples are packed without the budget check, so the room left can be
    negative: nothing more goes in."""
    assert best_subset([3, 4], 0) == [] and best_subset([3, 4], -5) == []


def test_the_token_counts_that_steer_mixing_are_those_of_the_samples_drawn():
    """mix_by="tokens" steers by each group's tokens drawn so far: the checkpoint's counts
    are exactly the packed lengths of the samples each group gave (none is skipped here),
    starting from nothing."""
    groups = {name: _group(name, _lengths(k, *SHARE_GROUPS[name])) for k, name in enumerate(SHARE_GROUPS)}
    dataset = _packed(groups, _config(mix_by="tokens"), {"short": 2, "medium": 1, "long": 1})
    list(itertools.islice(iter(dataset), 5))
    lengths = {name: _lengths(k, *SHARE_GROUPS[name]) for k, name in enumerate(SHARE_GROUPS)}
    drawn = {name: sum(lengths[name](i) for i in group.drawn) for name, group in groups.items()}
    assert dataset.state_dict()["stages"]["choose"]["group_tokens"] == drawn


def test_best_fit_packs_the_oldest_sample_beside_the_mandatory_ones_when_it_just_fits():
    cfg = _config(pack_strategy="best_fit")
    dataset, _, batches = _run(cfg, lambda i: cfg.max_num_tokens - 100, 3, mandatory_length=100)
    assert [[d["dataset_name"] for d in b["batch_data_indexes"]] for b in batches] == [["m", "g"]] * 3
    assert dataset.stats["skips"]["g"] == {}


def test_best_fit_skips_an_oldest_sample_with_no_room_only_after_it_waited_and_takes_its_tokens_back():
    """One token too many beside the mandatory sample: the oldest buffered sample waits a
    buffer's worth of packs (a later pack's mandatory samples might leave room), then it is
    skipped, counted by its reason, and the token counts that steer mixing leave it out."""
    cfg = _config(pack_strategy="best_fit", mix_by="tokens")
    length = cfg.max_num_tokens - 100 + 1
    waited, groups, batches = _run(cfg, lambda i: length, cfg.max_buffer_size, mandatory_length=100)
    assert waited.stats["skips"]["g"] == {}  # a buffer's worth of packs: all still waiting
    dataset, groups, batches = _run(cfg, lambda i: length, cfg.max_buffer_size + 1, mandatory_length=100)
    assert [[d["dataset_name"] for d in b["batch_data_indexes"]] for b in batches] == [["m"]] * len(batches)
    skipped = cfg.max_buffer_size  # the whole first buffer, after waiting
    assert dataset.stats["skips"]["g"] == {SkipReason.NO_ROOM_BESIDE_MANDATORY.value: skipped}
    assert dataset.state_dict()["stages"]["choose"]["group_tokens"]["g"] == length * (len(groups["g"].drawn) - skipped)


def test_best_fit_keeps_a_sample_that_fits_beside_a_later_smaller_mandatory_sample():
    """Mandatory samples of 110 then 10 tokens: a 120-token sample has no room beside the
    first but fits beside the second; it is packed there, never skipped."""
    cfg = _config(pack_strategy="best_fit", max_buffer_size=2)
    groups = {"g": _group("g", lambda i: 120), "m": _group("m", lambda i: 110 if i % 2 == 0 else 10)}
    dataset = _packed(groups, cfg, {"g": 1.0, "m": 0.0}, {"g": False, "m": True})
    batches = list(itertools.islice(iter(dataset), 8))
    assert dataset.stats["skips"].get("g", {}) == {}
    assert collections.Counter(_positions(batches, "g")).most_common(1)[0][1] == 1
    assert len(_positions(batches, "g")) >= 3


def test_best_fit_draws_past_its_buffer_while_samples_fill_the_pack():
    """Short samples: the pack is not limited to a buffer's worth of them."""
    cfg = _config(pack_strategy="best_fit", max_buffer_size=2, max_num_tokens=200, expected_num_tokens=180)
    _, _, batches = _run(cfg, lambda i: 10, 3)
    assert all(sum(b["sample_lens"][: len(b["batch_data_indexes"])]) >= 180 for b in batches)


# -- ties under mix_by="tokens" -------------------------------------------------------------
def _draws(weights, tokens, count=4000):
    from bagel_data.packing.strategies import choose_by_deficit

    rng = np.random.default_rng(5)
    return collections.Counter(choose_by_deficit(weights, tokens, rng) for _ in range(count))


@pytest.mark.parametrize("tokens", [[0, 0, 0], [10, 30, 0], [1000, 3000, 0]])
def test_a_tie_goes_to_a_weighted_random_positive_group(tokens):
    """At their targets (the start, or shares met exactly) the tied groups are drawn by weight,
    not the first in config order, and a zero-weight group is never drawn."""
    counts = _draws([1.0, 3.0, 0.0], tokens)
    assert set(counts) == {0, 1}
    assert counts[1] / sum(counts.values()) == pytest.approx(0.75, abs=0.03)


@pytest.mark.parametrize("weights, tokens", [([0.1, 0.7], [1, 7]), ([0.3, 0.6], [3, 6])])
def test_groups_at_their_targets_tie_whatever_the_float_rounding(weights, tokens):
    """Both groups at their targets exactly, but their deficits computed in floats differ by
    2e-16 or 4e-16: still a tie, drawn by weight, not always the group rounding favours."""
    counts = _draws(weights, tokens)
    assert set(counts) == {0, 1}


def test_one_token_below_target_is_no_tie():
    assert _draws([1.0, 3.0], [10, 29], count=50) == {1: 50}
    assert _draws([1.0, 3.0], [9, 30], count=50) == {0: 50}


@pytest.mark.parametrize("behind", [10**7, 10**9, 10**12])
def test_a_group_far_below_its_target_at_large_counts_is_drawn(behind):
    """A long run (or a weight schedule that just moved a target) leaves a group millions of
    tokens behind; there the tie tolerance is below the float spacing of the deficit, and
    the group furthest behind is still the one drawn, with no draw from the generator."""
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    assert choose_by_deficit([1.0, 1.0], [behind, 3 * behind], rng) == 0
    assert choose_by_deficit([2.0, 1.0, 1.0], [4 * behind, 0, 2 * behind], rng) == 1
    assert rng.bit_generator.state == before
