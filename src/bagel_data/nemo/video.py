"""Mirrors `nemo_automodel.components.datasets.multimodal.video`: frame sampling.

`FrameSampler` is the core's. The reference's module-level functions are here with their
signatures and return shapes, on the same PyAV decoder and frame rules (`media/video.py`),
so decord is never needed. Their random draws (how many frames, which frame of each
segment) come from `rng`, a keyword-only `numpy.random.Generator` (a fresh one when None),
never from the global `random` / `numpy.random` streams the reference reads.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

import numpy as np
from PIL import Image

from ..errors import VideoDecodeError
from ..media.video import FrameSampler, _probe, decode_frames, frame_indices, open_frame

# The reference's pattern, its unescaped dot included: the same names get the same numbers.
_FRAME_NUMBER = re.compile(r"_(\d+).jpg$")


def extract_frame_number(filename: str) -> int:
    """The n of a frame file named `<anything>_<n>.jpg`; -1 for any other name."""
    match = _FRAME_NUMBER.search(filename)
    return int(match.group(1)) if match else -1


def sort_frames(frame_paths: Iterable[str]) -> list[str]:
    """`frame_paths` ordered by the frame number of their file names (`extract_frame_number`);
    equal numbers keep their given order."""
    return sorted(frame_paths, key=lambda path: extract_frame_number(os.path.basename(path)))


def get_frame_indices(
    num_frames: int,
    vlen: int,
    sample: str = "rand",
    fix_start: int | None = None,
    input_fps: float = 1,
    max_num_frames: int = -1,
    *,
    rng: np.random.Generator | None = None,
) -> list[int]:
    """Indices of the frames to keep out of `vlen` (see `media.video.frame_indices`).

    'rand' takes a random frame of each of `min(num_frames, vlen)` equal segments, 'middle'
    the middle one, or, with `fix_start`, the one `fix_start` frames into the segment (the
    reference reads `fix_start` for 'middle' only); both are padded with the last index to
    `num_frames`. 'fps<r>' samples at r frames per second of `input_fps` video, at most
    `max_num_frames` when that is positive.
    """
    if fix_start is None or sample != "middle":
        return frame_indices(num_frames, vlen, sample, rng, input_fps=input_fps, max_num_frames=max_num_frames)
    segments = min(num_frames, vlen)
    starts = np.linspace(0, vlen, segments + 1).astype(int)[:-1]
    picked = [int(start) + int(fix_start) for start in starts]
    return picked + [picked[-1]] * (num_frames - segments)


def _frame_count(rng: np.random.Generator, min_num_frames: int, num_frames: int) -> int:
    """How many frames to keep: uniform in [min_num_frames, num_frames], as the reference draws."""
    if not 1 <= min_num_frames <= num_frames:
        raise ValueError(f"min_num_frames={min_num_frames} must be in [1, num_frames={num_frames}]")
    return int(rng.integers(min_num_frames, num_frames + 1))


def read_frames_decord(
    video_path: str,
    num_frames: int,
    sample: str = "rand",
    fix_start: int | None = None,
    clip: tuple[float, float] | None = None,
    min_num_frames: int = 4,
    *,
    rng: np.random.Generator | None = None,
) -> list[Image.Image]:
    """RGB frames of the video file at `video_path`, decoded with PyAV (no decord).

    Keeps a random number of frames in [min_num_frames, num_frames], chosen by
    `get_frame_indices` at the video's average frame rate; `clip=(start, end)` in seconds
    restricts the choice to that stretch. A file that cannot be decoded is a VideoDecodeError.
    """
    rng = np.random.default_rng() if rng is None else rng
    path = os.fspath(video_path)
    try:
        vlen, fps = _probe(path)
    except (VideoDecodeError, MemoryError):
        raise
    except Exception as err:  # av.FFmpegError, OSError: what a missing or bad file raises
        raise VideoDecodeError(path, f"{type(err).__name__}: {err}") from err
    offset = 0
    if clip:
        start, end = clip
        vlen, offset = int((end - start) * fps), int(start * fps)
    count = _frame_count(rng, min_num_frames, num_frames)
    chosen = get_frame_indices(count, vlen, sample, fix_start, input_fps=fps, rng=rng)
    # Upright, as decord gives them: it turns frames by the stream's display rotation.
    return decode_frames(path, [index + offset for index in chosen])


def read_frames_folder(
    video_path: str,
    num_frames: int,
    sample: str = "rand",
    fix_start: int | None = None,
    min_num_frames: int = 4,
    *,
    rng: np.random.Generator | None = None,
) -> list[Image.Image]:
    """RGB frames of a folder of extracted frames (`<name>_<n>.jpg`), in frame order.

    Keeps a random number of frames in [min_num_frames, num_frames] (`get_frame_indices` at
    one frame per second); a folder with no more frames than that gives all of them. Only
    the kept frames are opened.
    """
    rng = np.random.default_rng() if rng is None else rng
    folder = os.fspath(video_path)
    names = sort_frames(sorted(os.listdir(folder)))  # sorted first: ties never follow the listing
    count = _frame_count(rng, min_num_frames, num_frames)
    if len(names) > count:
        names = [names[i] for i in get_frame_indices(count, len(names), sample, fix_start, rng=rng)]
    return [open_frame(folder, os.path.join(folder, name)) for name in names]


__all__ = [
    "FrameSampler",
    "extract_frame_number",
    "get_frame_indices",
    "read_frames_decord",
    "read_frames_folder",
    "sort_frames",
]
