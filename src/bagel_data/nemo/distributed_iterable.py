"""Mirrors `nemo_automodel.components.datasets.multimodal.distributed_iterable`."""

from ..families.base import DistributedIterableDataset

__all__ = ["DistributedIterableDataset"]
