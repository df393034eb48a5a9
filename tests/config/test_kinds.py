"""schema/kinds.py's Number on its own: its bounds, `positive` (no setting uses it yet, so
test_junk_values.py cannot reach it) and how each describes itself."""

from __future__ import annotations

import pytest

from bagel_data.errors import ConfigError
from bagel_data.schema.kinds import Number


def test_a_positive_number_excludes_zero_and_says_so():
    kind = Number(positive=True)
    assert kind.check("k", 1e-300) == 1e-300 and kind.check("k", 3) == 3
    for value in (0, 0.0, -0.0, -1e-300):
        with pytest.raises(ConfigError, match=r"k = .*must be a finite number > 0"):
            kind.check("k", value)
    assert kind.describe() == "number > 0"


def test_bounds_are_inclusive_and_described():
    kind = Number(0, 1)
    assert [kind.check("k", v) for v in (0, 0.5, 1)] == [0, 0.5, 1]
    for value in (-1e-9, 1.000001, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match=r"in \[0, 1\]"):
            kind.check("k", value)
    assert Number(2).describe() == "number >= 2" and Number().describe() == "number"
    with pytest.raises(ConfigError, match="must be a number"):
        kind.check("k", True)
