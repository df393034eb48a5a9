"""Mirrors `nemo_automodel.components.datasets.multimodal.collate_fns`: the packed batch."""

from ..batch import SimpleCustomBatch, bagel_packed_collate_fn, collate_wrapper

__all__ = ["SimpleCustomBatch", "bagel_packed_collate_fn", "collate_wrapper"]
