"""A group's `weight`: a number, or a mixture schedule of `[step, weight]` pairs.

How a schedule is read and checked (config, no heavy imports); how the packer follows it
while packing is `packing/schedule.py` (`StepClock`).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence

from ..errors import ConfigError

EXAMPLE = "[[0, 1.0], [5000, 0.25]]"


@dataclasses.dataclass(frozen=True)
class WeightSchedule:
    """`[step, weight]` pairs, steps strictly increasing from 0."""

    steps: tuple[int, ...]
    weights: tuple[float, ...]

    def at(self, step: int) -> float:
        return self.weights[bisect.bisect_right(self.steps, step) - 1]

    def as_list(self) -> list[list]:
        return [[step, weight] for step, weight in zip(self.steps, self.weights)]

    def __float__(self) -> float:  # the weight at step 0, where a plain number is expected
        return self.weights[0]


def _is_number(value: object) -> bool:
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and value == value
        and abs(value) != float("inf")
    )


def parse_weight(key: str, value: object) -> float | WeightSchedule:
    """A group's `weight`: a number >= 0, or a schedule. Anything else is a `ConfigError`."""
    if _is_number(value):
        if value < 0:  # type: ignore[operator]  # a real number
            raise ConfigError(key, value, f"must be a number >= 0, or a schedule such as {EXAMPLE}")
        return float(value)  # type: ignore[arg-type]
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or not value:
        raise ConfigError(key, value, f"must be a number >= 0, or a list of [step, weight] pairs such as {EXAMPLE}")
    steps: list[int] = []
    weights: list[float] = []
    for pair in value:
        if not isinstance(pair, Sequence) or isinstance(pair, (str, bytes)) or len(pair) != 2:
            raise ConfigError(key, value, f"each entry must be a [step, weight] pair, not {pair!r}; e.g. {EXAMPLE}")
        step, weight = pair
        if not isinstance(step, numbers.Integral) or isinstance(step, bool) or step < 0:
            raise ConfigError(key, value, f"step {step!r} must be an integer >= 0 (the pack index on a rank)")
        if not _is_number(weight) or weight < 0:
            raise ConfigError(key, value, f"weight {weight!r} (at step {step}) must be a number >= 0")
        if steps and step <= steps[-1]:
            raise ConfigError(key, value, f"steps must increase: {step} comes after {steps[-1]}")
        steps.append(int(step))
        weights.append(float(weight))
    if steps[0] != 0:
        raise ConfigError(
            key, value, f"the schedule must start at step 0 (say [0, 0.0] for a group that joins at step {steps[0]})"
        )
    if len(steps) == 1:
        return weights[0]
    return WeightSchedule(tuple(steps), tuple(weights))


def as_schedule(weight: float | WeightSchedule) -> WeightSchedule:
    if isinstance(weight, WeightSchedule):
        return weight
    return WeightSchedule((0,), (float(weight),))


def phases(weights: Mapping[str, float | WeightSchedule]) -> list[tuple[int, dict[str, float]]]:
    """`(first step, weight of each group)` of every phase, in order."""
    schedules = {name: as_schedule(weight) for name, weight in weights.items()}
    starts = sorted({step for schedule in schedules.values() for step in schedule.steps})
    return [(start, {name: schedule.at(start) for name, schedule in schedules.items()}) for start in starts]


def check_phases(weights: Mapping[str, float | WeightSchedule]) -> None:
    """The weights must sum to a finite number more than 0 at every step (1e308 + 1e308 is
    infinite: the mixing draw would divide by it)."""
    for start, phase in phases(weights):
        total = sum(phase.values())
        if not math.isfinite(total) or total <= 0:
            where = "" if start == 0 else f" from step {start} on"
            rule = "a finite number" if not math.isfinite(total) else "more than 0"
            raise ConfigError(
                "weight",
                {name: _plain(w) for name, w in weights.items()},
                f"the group weights must sum to {rule}{where}",
            )


def _plain(weight: float | WeightSchedule):
    return weight.as_list() if isinstance(weight, WeightSchedule) else weight
