"""`StageProfiler`: self time and call count of each pipeline stage inside a `with` block.

It attaches to the library's seams (`bagel_data.instruments`): a stage is timed wherever
the library marks it, whatever its function is called.
"""

from __future__ import annotations

import collections
import contextlib
import time

from bagel_data.instruments import Instrument, attached

_now = time.perf_counter
# Each row of the breakdown: the library's stages it sums (self time, children excluded).
ROWS: dict[str, tuple[str, ...]] = {
    "read": ("read",),
    "decode": ("decode", "decode_frame", "decode_video"),
    "resize": ("resize",),
    "to_uint8": ("to_uint8",),
    "tensorize": ("tensorize",),  # direct family iteration only
    # floats (or, with pixel_format: uint8, bytes) written into the batch's pixel tensors
    "convert_vae": ("convert_vae",),
    "convert_vit": ("convert_vit",),
    "tokenize": ("tokenize",),
    "pack": ("pack",),
    "mask": ("mask",),
    "to_batch": ("to_batch",),
    "collate": ("collate",),
}


class StageProfiler:
    """Self time (children excluded) and call count of each pipeline stage inside the block."""

    def __init__(self):
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)
        self._stack: list[float] = []
        self._block: contextlib.ExitStack | None = None

    def _timed(self, row: str) -> Instrument:
        stack = self._stack

        def timed(call, args, kwargs):
            stack.append(0.0)
            start = _now()
            try:
                return call(*args, **kwargs)
            finally:
                elapsed = _now() - start
                self.seconds[row] += elapsed - stack.pop()
                self.calls[row] += 1
                if stack:
                    stack[-1] += elapsed

        return timed

    def __enter__(self):
        instruments = {stage: self._timed(row) for row, stages in ROWS.items() for stage in stages}
        self._block = contextlib.ExitStack()
        self._block.enter_context(attached(instruments))
        return self

    def __exit__(self, *exc) -> None:
        assert self._block is not None
        self._block.close()

    def breakdown(self, wall_seconds: float) -> dict:
        stages: dict[str, dict[str, float]] = {s: {"seconds": self.seconds[s], "calls": self.calls[s]} for s in ROWS}
        stages["other"] = {"seconds": max(0.0, wall_seconds - sum(self.seconds.values())), "calls": 0}
        for entry in stages.values():
            entry["share"] = entry["seconds"] / wall_seconds if wall_seconds else 0.0
        return stages
