"""What an entrance hands the packer: the checked family datasets, how they mix, the
settings, the topology and the compat policy (`assembly.assemble` makes it)."""

from __future__ import annotations

import dataclasses

from ..compat import CompatPolicy
from .config import PackingConfig


@dataclasses.dataclass(frozen=True)
class Assembled:
    """The checked parts of a packed dataset."""

    datasets: dict  # group name -> family dataset, in the config's order
    weights: dict  # group name -> weight
    mandatory: dict  # group name -> is_mandatory
    config: PackingConfig  # every setting (`Settings`)
    local_rank: int
    world_size: int
    policy: CompatPolicy  # shared by the packer and every family in `datasets`
