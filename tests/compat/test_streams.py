"""The random sources of both modes share one protocol (compat/streams.py).

Each source's `get_state` / `set_state` round-trips: the draws after a restore are the draws
the source would have made. The default mode's `SeededRandom` draws as the numpy generator
it replaced (same key, same values), stays itself through pickling, and refuses a state
out of range by name; a caller's own numpy generator is drawn through, not copied.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from bagel_data.compat import CompatRandom, SeededRandom, check_pcg64_state
from bagel_data.compat.streams import as_random_source


def _draws(rng) -> list:
    values = [rng.random(), rng.integers(3, 900), rng.standard_normal(), rng.frame_count(2, 9)]
    values += rng.permutation(7).tolist() + rng.frame_picks([0, 4, 8], [3, 7, 11], 12, 3).tolist()
    return values


@pytest.mark.parametrize("make", [lambda: SeededRandom.from_key([7, 0, 1]), lambda: CompatRandom(11, 12)])
def test_a_restored_state_gives_the_same_draws(make):
    rng = make()
    _draws(rng)
    state = rng.get_state()
    want = _draws(rng)
    other = make()
    other.set_state(state)
    assert _draws(other) == want
    assert _draws(make()) != want  # the state, not the seed, decided them


def test_the_default_source_draws_as_numpy_did():
    key = [7, 0, 1, 0x9ACC]
    ours, numpy = SeededRandom.from_key(key), np.random.default_rng(np.random.SeedSequence(key))
    assert [ours.random() for _ in range(5)] == [numpy.random() for _ in range(5)]
    assert ours.frame_picks([0, 4], [3, 8], 8, 2).tolist() == numpy.integers([0, 4], [3, 8]).tolist()
    assert ours.frame_count(2, 9) == int(numpy.integers(2, 9))


def test_an_empty_segment_falls_back_to_a_sorted_subset_of_all_frames():
    rng, numpy = SeededRandom.from_key([1]), np.random.default_rng(np.random.SeedSequence([1]))
    picked = rng.frame_picks([0, 1, 1], [1, 1, 2], 3, 3)  # the middle segment is empty
    assert picked.tolist() == np.sort(numpy.permutation(3)[:3]).tolist()


def test_a_seeded_source_pickles_as_itself_with_its_state():
    rng = SeededRandom.from_key([5])
    rng.random()
    copy = pickle.loads(pickle.dumps(rng))
    assert isinstance(copy, SeededRandom)
    assert copy.random() == rng.random()


def test_a_callers_numpy_generator_is_drawn_through():
    theirs, twin = np.random.default_rng(3), np.random.default_rng(3)
    source = as_random_source(theirs)
    assert source.frame_count(1, 100) == int(twin.integers(1, 100))
    assert theirs.random() == twin.random()  # its own state advanced by the draw above


def test_compat_and_default_states_do_not_cross():
    with pytest.raises(ValueError, match="compat"):
        CompatRandom(1, 1).set_state(SeededRandom.from_key([1]).get_state())
    with pytest.raises(ValueError, match="PCG64"):
        SeededRandom.from_key([1]).set_state(CompatRandom(1, 1).get_state())


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"state": {"state": -1, "inc": 1}}, "state.state"),
        ({"state": {"state": 1, "inc": 2**128}}, "state.inc"),
        ({"state": {"state": True, "inc": 1}}, "state.state"),
        ({"state": {"state": 1}}, "'state' and 'inc'"),
        ({"has_uint32": 2}, "has_uint32"),
        ({"uinteger": 2**32}, "uinteger"),
        ({"bit_generator": "MT19937"}, "PCG64"),
    ],
)
def test_a_state_out_of_range_is_named(change, named):
    state = {**SeededRandom.from_key([1]).get_state(), **change}
    with pytest.raises(ValueError, match=named):
        check_pcg64_state(state)
    check_pcg64_state(SeededRandom.from_key([1]).get_state())  # a real one passes
