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
from typing import TYPE_CHECKING

from ..errors import ConfigError, SkipReason
from .fixes import fix_for

if TYPE_CHECKING:
    from ..sources.parquet import ParquetReader

DEFAULT_MAX_DROP_FRACTION = 0.1
UNREADABLE = SkipReason.UNIT_UNREADABLE.value


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


def rows_per_unit(dataset) -> float | None:
    """The rows an unreadable unit of a parquet group stands for: the mean over the group's
    units whose file footer reads (a whole file for T2I, a row group for edit and
    interleaved). A skip names no file, so the unreadable unit's own footer is not looked
    up: the mean of its siblings is the estimate (exact where the files are alike). None
    when the group is not parquet or no footer reads."""
    plan = getattr(dataset, "units", None)
    units = list(plan.kind.sorted_units(plan.data_paths)) if plan is not None and plan.data_paths is not None else []
    paths = [unit if isinstance(unit, str) else unit[0] for unit in units]
    if not units or not all(isinstance(path, str) and path.endswith(".parquet") for path in paths):
        return None
    from ..sources.parquet import ParquetReader  # pyarrow and torch: kept off the CLI's --help

    readers: dict[str, ParquetReader | None] = {}
    rows = []
    try:
        for unit, path in zip(units, paths):
            if path not in readers:
                try:
                    readers[path] = ParquetReader(path)
                except Exception:  # the unreadable files themselves
                    readers[path] = None
            reader = readers[path]
            if reader is not None:
                rows.append(reader.num_rows if isinstance(unit, str) else reader.row_group_rows(int(unit[1])))
    finally:
        for reader in readers.values():
            if reader is not None:
                reader.close()
    return sum(rows) / len(rows) if rows else None


def group_losses(
    samples: Mapping[str, int],
    skips: Mapping[str, Mapping[str, int]],
    unit_rows: Mapping[str, float | None] | None = None,
) -> list[Loss]:
    """Per group of a run: rows skipped against rows skipped plus samples packed, with the fix
    for its most frequent skip reason (`tools/fixes.py`). `unit_rows`: per group, the rows an
    unreadable unit stands for (`rows_per_unit`); a skip log counts such a unit as one row."""
    losses = []
    for group in sorted(samples.keys() | skips.keys()):
        counts = dict(skips.get(group, {}))
        per_unit = (unit_rows or {}).get(group)
        if per_unit and counts.get(UNREADABLE):
            counts[UNREADABLE] = max(counts[UNREADABLE], round(counts[UNREADABLE] * per_unit))
        lost = sum(counts.values())
        if lost:
            reason = max(counts, key=lambda name: counts[name])
            cause = f"{counts[reason]} skipped as {reason}: {fix_for(reason)}"
            losses.append(Loss(group, lost, lost + samples.get(group, 0), cause))
    return losses
