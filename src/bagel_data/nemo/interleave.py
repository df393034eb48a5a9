"""Mirrors `nemo_automodel.components.datasets.multimodal.interleave`: the extension bases."""

from ..families.interleaved_base import InterleavedBaseIterableDataset, ParquetStandardIterableDataset

__all__ = ["InterleavedBaseIterableDataset", "ParquetStandardIterableDataset"]
