"""Mirrors `nemo_automodel.components.datasets.multimodal.distributed_iterable`."""

import logging

from ..families.base import DistributedIterableDataset

# NeMo's module-level logger, here a child of the `bagel_data` logger (its level and
# handlers apply); the base class logs through the package's own loggers.
logger = logging.getLogger(__name__)

__all__ = ["DistributedIterableDataset", "logger"]
