"""The group-choice rules (packing/choosers.py) at their edges: the weighted draw follows a
weight change, and a saved count is an int per known group, negative where the rule's
counts may be (a look-ahead sample drawn before a change point and skipped after it)."""

from __future__ import annotations

import pytest

from bagel_data import ResumeError
from bagel_data.packing.choosers import TokenShares, WeightedDraw, group_counts


class _Half:
    def random(self) -> float:
        return 0.5


def test_the_weighted_draw_follows_new_weights():
    rule = WeightedDraw(["a", "b"])
    assert rule.choose([1.0, 0.0], _Half()) == 0
    assert rule.choose([0.0, 1.0], _Half()) == 1  # a schedule's change point
    assert rule.choose([1.0, 3.0], _Half()) == 1 and rule.choose([3.0, 1.0], _Half()) == 0


def test_the_token_counts_load_negative_counts_and_refuse_bools():
    rule = TokenShares(["a", "b"])
    rule.load_state_dict({"group_tokens": {"a": -40, "b": 7}}, {})
    assert rule.tokens == [-40, 7]
    with pytest.raises(ResumeError, match="stages.choose.group_tokens"):
        rule.load_state_dict({"group_tokens": {"a": True}}, {})


@pytest.mark.parametrize("counts", [{"a": -1}, {"a": 1.0}, {"a": False}, {"c": 1}, [1, 2]])
def test_non_negative_counts_refuse_what_is_not_one(counts):
    with pytest.raises(ResumeError, match="field f"):
        group_counts("f", counts, ["a", "b"], allow_negative=False)
    assert group_counts("f", {"b": 0}, ["a", "b"], allow_negative=False) == [0, 0]
