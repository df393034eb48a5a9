"""`StageProfiler`: self time and call count of each pipeline stage inside a `with` block."""

from __future__ import annotations

import collections
import time
from typing import Any

from .. import batch as batch_module
from ..families import edit, t2i, vlm
from ..media import video
from ..media.images import ImageTransform
from ..packing import pack as pack_module
from ..sources.jsonl import JsonlIndex
from ..sources.parquet import ParquetReader
from .patcher import Patcher

_now = time.perf_counter
# Where each family looks up its image decoder: what the profiler times and the recorder records.
DECODERS = [(t2i, "decode_image"), (edit, "decode_image"), (vlm, "decode_image")]


class StageProfiler:
    """Self time (children excluded) and call count of each pipeline stage inside the block."""

    def __init__(self, tokenizer):
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)
        self._stack: list[float] = []
        self._targets: dict[str, list[tuple[Any, str]]] = {
            "read": [(ParquetReader, "read_row_group"), (JsonlIndex, "read_line")],
            "decode": [*DECODERS, (video, "open_frame"), (video, "decode_frames")],
            "resize": [(ImageTransform, "resize")],
            "to_uint8": [(ImageTransform, "pending")],
            "tensorize": [(ImageTransform, "to_tensor")],  # direct family iteration only
            # floats (or, with pixel_format: uint8, bytes) written into the batch's pixel tensors
            "convert_vae": [(pack_module, "pad_images"), (pack_module, "pad_pixels")],
            "convert_vit": [(pack_module, "stack_patches"), (pack_module, "stack_pixel_patches")],
            "tokenize": [(type(tokenizer), "encode")],
            "pack": [(pack_module.PackBuilder, "add")],
            "mask": [(pack_module, "prepare_attention_mask_per_sample")],
            "to_batch": [(pack_module.PackBuilder, "to_batch")],
            "collate": [(batch_module.SimpleCustomBatch, "__init__")],
        }

    def _timed(self, stage: str, fn):
        stack = self._stack

        def timed(*args, **kwargs):
            stack.append(0.0)
            start = _now()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = _now() - start
                self.seconds[stage] += elapsed - stack.pop()
                self.calls[stage] += 1
                if stack:
                    stack[-1] += elapsed

        return timed

    def __enter__(self):
        self._patcher = Patcher()
        for stage, targets in self._targets.items():
            for owner, name in targets:
                self._patcher.wrap(owner, name, lambda fn, stage=stage: self._timed(stage, fn))
        return self

    def __exit__(self, *exc) -> None:
        self._patcher.__exit__(*exc)

    def breakdown(self, wall_seconds: float) -> dict:
        stages: dict[str, dict[str, float]] = {
            s: {"seconds": self.seconds[s], "calls": self.calls[s]} for s in self._targets
        }
        stages["other"] = {"seconds": max(0.0, wall_seconds - sum(self.seconds.values())), "calls": 0}
        for entry in stages.values():
            entry["share"] = entry["seconds"] / wall_seconds if wall_seconds else 0.0
        return stages
