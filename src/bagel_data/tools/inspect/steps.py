"""`inspect --step N`: a run config whose mixture schedules are held at the weights in force
at step N, so a staged config's later stage can be looked at as it is written.

The packs drawn are those a stream makes under step N's weights from its start: what each
pack of that stage is made of, not the very packs of step N (those would need every pack
before them to be made first).
"""

from __future__ import annotations

import dataclasses

from ...errors import ConfigError
from ...schema.weights import parse_weight
from ..run import RunConfig


def weights_at_step(config: RunConfig, step: int) -> dict[str, float]:
    """Each group's weight at `step` (a plain weight holds at every step)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ConfigError("step", step, "must be a training step >= 0")
    weights = {}
    for name, group in config.grouped_datasets.items():
        weight = parse_weight(f"{name}.weight", group.get("weight", 0.0))
        weights[name] = weight if isinstance(weight, float) else weight.at(step)
    return weights


def config_at_step(config: RunConfig, step: int) -> RunConfig:
    """`config` with every group's weight fixed at its value at `step`."""
    weights = weights_at_step(config, step)
    if not any(weights.values()):
        raise ConfigError("step", step, f"every group's weight is 0 at this step: {weights}")
    groups = {name: {**group, "weight": weights[name]} for name, group in config.grouped_datasets.items()}
    return dataclasses.replace(config, grouped_datasets=groups)
