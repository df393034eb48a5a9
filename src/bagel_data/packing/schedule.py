"""Mixture schedules: a group weight that changes with the training step.

A group's `weight` is a number, or a list of `[step, weight]` pairs, each weight holding
from its step on (`[[0, 1.0], [5000, 0.25]]`). The step is the index of the pack on its
rank, counted over all the rank's DataLoader workers: worker `w` of `K` makes steps
`w, w + K, w + 2K, ...` (the loader takes one pack from each worker in turn), so the
schedule follows the training step whatever the worker count. After an elastic restart
the count goes on from the step the old run had reached (`step_base`).

A phase change resets the token counts that `mix_by="tokens"` steers by, so each phase
meets its own targets instead of making up for the last one's.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from ..schema.weights import WeightSchedule, as_schedule, check_phases, parse_weight, phases

# The weights themselves (parsing, phases, their check) are config: schema/weights.py.
__all__ = ["StepClock", "WeightSchedule", "as_schedule", "check_phases", "parse_weight", "phases"]


class StepClock:
    """The step of each pack a worker makes, and the group weights at that step."""

    def __init__(self, schedules: Sequence[WeightSchedule], worker_id: int, num_workers: int, base: int = 0):
        self.schedules = list(schedules)
        self.worker_id, self.stride, self.base = worker_id, max(num_workers, 1), base
        self.changes = sorted({step for schedule in self.schedules for step in schedule.steps})

    def step(self, packs: int) -> int:
        """The step of the worker's pack number `packs` (0-based) since its stream began."""
        return self.base + self.worker_id + packs * self.stride

    def weights(self, step: int) -> list[float]:
        return [schedule.at(step) for schedule in self.schedules]

    def phase(self, step: int) -> int:
        return bisect.bisect_right(self.changes, step)

    def phase_changed(self, packs: int) -> bool:
        """Whether pack `packs` is the first of this worker in a new phase."""
        return packs > 0 and self.phase(self.step(packs)) != self.phase(self.step(packs - 1))
