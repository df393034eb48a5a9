"""Seams: the named stages of the pipeline where a measuring tool may attach.

The library marks each stage's function with `@seam("decode")` (the names: `STAGES`). While
nothing is attached, the marked function runs as it is, behind one attribute test. A tool
attaches for the life of a `with attached({...}):` block an *instrument* per stage: a
callable `instrument(call, args, kwargs)` that must return what `call(*args, **kwargs)`
would (it may time the call, look at its arguments and result, or stand in for it, as the
benchmark's baselines do). The benchmark (benchmarks/bagel_bench: `profiler`, `recorder`)
reaches the pipeline only here, so renaming or moving a stage's function breaks nothing.

Attachments are process-wide, like the tool they serve; nested blocks compose (the block
entered last is the outermost) and each block restores what it found.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
Instrument = Callable[[Callable[..., Any], tuple, dict], Any]

STAGES: dict[str, str] = {
    "open": "a file or object opened for reading (`sources.storage.open_input`)",
    "read": "a parquet row group or a JSONL line read",
    "decode": "an image decoded (`media.images.decode_image`)",
    "decode_frame": "one frame file of a frame folder opened and decoded",
    "decode_video": "the wanted frames of a video decoded (the stream once)",
    "resize": "an image resized by its transform",
    "to_uint8": "resized pixels kept as bytes until the batch is written",
    "tensorize": "an image made a float tensor by its transform (direct family iteration)",
    "prepare": "a decoded image through its transform: resized and pending (the families' call)",
    "tokenize": "text encoded by the tokenizer",
    "build": "a sample assembled from its parts (`SampleBuilder.build`)",
    "pack": "a sample laid into the pack",
    "mask": "a sample's dense attention mask built (nested-mask mode)",
    "convert_vae": "the pack's VAE pixels written into the batch",
    "convert_vit": "the pack's ViT patches written into the batch",
    "to_batch": "the pack made a batch dict",
    "collate": "a batch collated (`SimpleCustomBatch`)",
}


class Seam:
    """One stage: the instrument attached to it, or None."""

    __slots__ = ("instrument", "name")

    def __init__(self, name: str):
        self.name = name
        self.instrument: Instrument | None = None


SEAMS: dict[str, Seam] = {name: Seam(name) for name in STAGES}


def _seam_named(stage: str) -> Seam:
    if stage not in SEAMS:
        raise ValueError(f"no pipeline stage {stage!r}: the stages are {', '.join(STAGES)} (bagel_data.instruments)")
    return SEAMS[stage]


def seam(stage: str) -> Callable[[F], F]:
    """Mark the decorated function (or method) as stage `stage`."""
    point = _seam_named(stage)

    def mark(function: F) -> F:
        @functools.wraps(function)
        def at_seam(*args, **kwargs):
            instrument = point.instrument
            if instrument is None:
                return function(*args, **kwargs)
            return instrument(function, args, kwargs)

        return at_seam  # type: ignore[return-value]

    return mark


def _outside(outer: Instrument, inner: Instrument | None) -> Instrument:
    """`outer` around `inner`: `outer` sees the call that runs `inner`."""
    if inner is None:
        return outer

    def both(function, args, kwargs):
        return outer(lambda *a, **k: inner(function, a, k), args, kwargs)

    return both


@contextlib.contextmanager
def attached(instruments: Mapping[str, Instrument]) -> Iterator[None]:
    """Attach `instruments` ({stage: instrument}) for the life of the block."""
    points = {stage: _seam_named(stage) for stage in instruments}
    found = {stage: point.instrument for stage, point in points.items()}
    for stage, point in points.items():
        point.instrument = _outside(instruments[stage], found[stage])
    try:
        yield
    finally:
        for stage, point in points.items():
            point.instrument = found[stage]
