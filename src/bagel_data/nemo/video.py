"""Mirrors `nemo_automodel.components.datasets.multimodal.video`: frame sampling."""

from ..media.video import FrameSampler

__all__ = ["FrameSampler"]
