"""A checkpoint's fields are checked against each other, not one by one.

Each field of a hand-edited checkpoint can be well typed while the whole is impossible: a
stream that packed more tokens in its phase than in its life, more packs than tokens. Used
as it is, such a checkpoint stalls (a backlog whose pace is never met never packs) or
miscounts; it is a `ResumeError` naming the fields.
"""

from __future__ import annotations

import copy
import itertools
import sys
from pathlib import Path

import pytest

from bagel_data import ResumeError
from helpers.golden import as_worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packing"))
from test_pacing import SWITCH, WORKERS, _dataset, _rows

DRAINING = SWITCH // WORKERS + 4  # worker 1 of rank 1: the backlog drains after this many packs


@pytest.fixture(scope="module")
def mid_drain() -> dict:
    with as_worker(1, WORKERS):
        dataset, _ = _dataset("best_fit", 1, 1)
        list(itertools.islice(iter(dataset), DRAINING))
        state = copy.deepcopy(dataset.state_dict())
    assert _backlog(state) > 0, "a backlog drains at this cut"
    return state


def _backlog(state: dict) -> int:
    return state["stages"]["pace"]["backlog"]


def _phase_tokens(state: dict) -> dict:
    return state["stages"]["pace"]["packed_tokens"]


def _resume(state: dict, count: int = 1) -> list:
    with as_worker(1, WORKERS):
        dataset, _ = _dataset("best_fit", 1, 1)
        dataset.load_state_dict(state)
        return [_rows(batch) for batch in itertools.islice(iter(dataset), count)]


def test_phase_tokens_beyond_the_streams_tokens_are_refused(mid_drain):
    state = copy.deepcopy(mid_drain)
    _phase_tokens(state)["vlm"] = 10**15
    with pytest.raises(ResumeError, match=r"packed_tokens .*tokens"):
        _resume(state)


def test_more_packs_than_tokens_is_refused(mid_drain):
    state = copy.deepcopy(mid_drain)
    state["packs"] = state["tokens"] + 1
    with pytest.raises(ResumeError, match=r"packs .*tokens"):
        _resume(state)


def test_more_samples_than_tokens_is_refused(mid_drain):
    state = copy.deepcopy(mid_drain)
    state["samples"]["t2i"] = state["tokens"] + 1
    with pytest.raises(ResumeError, match=r"samples .*tokens"):
        _resume(state)


def test_counts_of_an_unknown_group_are_refused(mid_drain):
    state = copy.deepcopy(mid_drain)
    _phase_tokens(state)["vlm_typo"] = 5
    with pytest.raises(ResumeError, match=r"packed_tokens .*vlm_typo"):
        _resume(state)


def test_the_unedited_mid_drain_checkpoint_resumes_and_drains(mid_drain):
    with as_worker(1, WORKERS):
        full = [_rows(b) for b in itertools.islice(iter(_dataset("best_fit", 1, 1)[0]), DRAINING + 20)]
    assert _resume(copy.deepcopy(mid_drain), 20) == full[DRAINING:]
