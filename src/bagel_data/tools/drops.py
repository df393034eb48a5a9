"""The data-loss gate of `prepare` and `run`: a command that loses more than a fraction of a
group's rows (or of its input) fails, naming the likely cause, unless told to accept it.

Losing rows is normal in small numbers (a broken image here and there) and a mistake in large
ones (an image root one folder off drops nearly everything); an exit status of 0 must mean
the second did not happen. `--max-drop-fraction` (default 0.1) sets the line, `--allow-drops`
accepts any loss that still leaves rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from ..errors import ConfigError
from .fixes import fix_for

DEFAULT_MAX_DROP_FRACTION = 0.1


@dataclasses.dataclass(frozen=True)
class Loss:
    """`lost` of `total` rows of `name` (a group, or "input") were dropped; `cause` says why."""

    name: str
    lost: int
    total: int
    cause: str

    @property
    def fraction(self) -> float:
        return self.lost / self.total if self.total else 0.0

    def describe(self) -> str:
        return (
            f"{self.name}: {self.lost} of {self.total} rows dropped ({self.fraction:.0%}). Likely cause: {self.cause}"
        )


def check_max_drop_fraction(value: float) -> float:
    if not 0.0 <= value <= 1.0:  # also refuses NaN
        raise ConfigError("max_drop_fraction", value, "must be a fraction of rows between 0 and 1, e.g. 0.1")
    return value


def over_limit(losses: Iterable[Loss], max_fraction: float) -> list[Loss]:
    """The losses above `max_fraction` of their rows (a loss exactly at the line passes)."""
    check_max_drop_fraction(max_fraction)
    return [loss for loss in losses if loss.lost and loss.fraction > max_fraction]


def group_losses(samples: Mapping[str, int], skips: Mapping[str, Mapping[str, int]]) -> list[Loss]:
    """Per group of a run: rows skipped against rows skipped plus samples packed, with the fix
    for its most frequent skip reason (`tools/fixes.py`)."""
    losses = []
    for group in sorted(samples.keys() | skips.keys()):
        counts = skips.get(group, {})
        lost = sum(counts.values())
        if lost:
            reason = max(counts, key=lambda name: counts[name])
            cause = f"{counts[reason]} skipped as {reason}: {fix_for(reason)}"
            losses.append(Loss(group, lost, lost + samples.get(group, 0), cause))
    return losses
