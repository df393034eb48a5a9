"""Mirrors `nemo_automodel.components.datasets.multimodal.interleave`: the extension bases
and the edit family built on them (`UnifiedEditIterableDataset`)."""

from ..families.edit import UnifiedEditIterableDataset
from ..families.interleaved_base import InterleavedBaseIterableDataset, ParquetStandardIterableDataset

__all__ = ["InterleavedBaseIterableDataset", "ParquetStandardIterableDataset", "UnifiedEditIterableDataset"]
