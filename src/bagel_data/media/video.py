"""Video frame sampling on PyAV + Pillow: pick a random number of frames, one per segment.

A path ending in "/" is a folder of extracted frames (`<name>_<n>.jpg`); anything else is a
video file. Every random draw comes from the `numpy.random.Generator` passed in, so a seeded
generator gives the same frames on every run and in every worker, and no global generator
(`random`, `numpy.random`, torch) is ever touched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Iterable

import av
import numpy as np
from PIL import Image

from ..compat.streams import RandomSource, as_random_source
from ..errors import ConfigError, ImageTooLargeError, VideoDecodeError
from ..instruments import seam
from ..sources import storage
from .video_decode import ShortStream, count_corrected, decode_at
from .video_open import open_video, video_stream
from .video_probe import FrameTable, TableCache, probe_stream
from .video_remote import probe_remote
from .video_tables import shared_table

_SAMPLE_FORMS = "'rand', 'middle' or 'fps<rate>' (e.g. 'fps0.5')"
# Same pattern as the reference (the dot is unescaped there too), so the order is identical.
_FRAME_NUMBER = re.compile(r"_(\d+).jpg$")
# Demuxing a video once serves both the sampler's count and the decode that follows.
_TABLES = TableCache()


def _output_fps(sample: str) -> float | None:
    """The rate of an 'fps<rate>' form, None for 'rand'/'middle'; ValueError otherwise."""
    if sample in ("rand", "middle"):
        return None
    if sample.startswith("fps"):
        try:
            rate = float(sample[3:])
        except ValueError:
            rate = float("nan")
        if np.isfinite(rate) and rate > 0:
            return rate
    raise ConfigError("sample", sample, f"use {_SAMPLE_FORMS}")


def frame_indices(
    num_frames: int,
    vlen: int,
    sample: str = "rand",
    rng: RandomSource | np.random.Generator | None = None,
    *,
    input_fps: float = 1.0,
    max_num_frames: int = -1,
) -> list[int]:
    """Indices of the frames to keep out of `vlen`.

    'rand'/'middle': split [0, vlen) into min(num_frames, vlen) segments and take a random
    (or the middle) frame of each, padded with the last index to `num_frames` entries.
    'fps<r>': one frame per 1/r seconds at segment centres, capped to `max_num_frames` when
    that is positive; `num_frames` is ignored and the list may be empty.
    """
    output_fps = _output_fps(sample)
    if vlen < 1:
        raise ValueError(f"vlen must be >= 1, got {vlen}")
    if output_fps is not None:
        return _fps_indices(vlen, input_fps, output_fps, max_num_frames)
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    n = min(num_frames, vlen)
    bounds = np.linspace(0, vlen, n + 1).astype(int)
    starts, ends = bounds[:-1], bounds[1:] - 1
    if sample == "middle":
        picked = (starts + ends) // 2
    else:
        # compat="bagel": the reference's draws, in its order (`RandomSource.frame_picks`)
        picked = as_random_source(rng).frame_picks(starts, ends, vlen, n)
    indices = [int(i) for i in picked]
    return indices + [indices[-1]] * (num_frames - n)


# The most sampling instants an 'fps<r>' rule may compute: beyond it the stream's timing is
# absurd (a patched rate of 4.7e-10 fps would ask for 192 GiB), not a long video.
MAX_FPS_SAMPLES = 10_000_000


def _fps_indices(vlen: int, input_fps: float, output_fps: float, max_num_frames: int) -> list[int]:
    delta = 1.0 / output_fps
    instants = vlen / input_fps / delta if input_fps > 0 else float("inf")
    if not instants <= MAX_FPS_SAMPLES:
        raise ValueError(
            f"{vlen} frames at {input_fps!r} fps sampled at {output_fps} fps make {instants:.3g} instants, "
            f"over {MAX_FPS_SAMPLES}: the stream's timing is absurd"
        )
    seconds = np.arange(delta / 2, vlen / input_fps + delta / 2, delta)
    indices = [int(i) for i in np.around(seconds * input_fps).astype(int) if i < vlen]
    return indices[:max_num_frames] if max_num_frames > 0 else indices


def sort_frame_names(names: Iterable[str]) -> list[str]:
    """Order frame file names by the n of `_<n>.jpg`; names without it come first (as -1).

    Ties are broken by name so the order never depends on the file system's listing order.
    """

    def key(name: str) -> tuple[int, str]:
        match = _FRAME_NUMBER.search(name)
        return (int(match.group(1)) if match else -1, name)

    return sorted(names, key=key)


@dataclasses.dataclass(frozen=True)
class FrameSampler:
    """Reads a random number of frames, uniform in [min_num_frames, max_num_frames].

    `max_num_frames <= 0` means "no cap" and is only valid with 'fps<rate>' sampling.
    """

    max_num_frames: int = -1
    min_num_frames: int = 8
    sample: str = "rand"

    def __post_init__(self) -> None:
        is_fps = _output_fps(self.sample) is not None
        if self.max_num_frames <= 0 and not is_fps:
            raise ConfigError(
                "max_num_frames",
                self.max_num_frames,
                f"set a positive frame cap for sample={self.sample!r}; only fps sampling runs without one",
            )
        if self.max_num_frames > 0 and not 1 <= self.min_num_frames <= self.max_num_frames:
            raise ConfigError(
                "min_num_frames",
                self.min_num_frames,
                f"must be in [1, max_num_frames={self.max_num_frames}]",
            )

    def __call__(self, path: str, rng: np.random.Generator | None = None) -> list[Image.Image]:
        """RGB frames of the video file or frame folder (trailing '/') at `path`."""
        path = os.fspath(path)
        rng = np.random.default_rng() if rng is None else rng
        if path.endswith("/"):
            return self._read_folder(path, rng)
        return self._read_video(path, rng)

    def _draw_count(self, rng: np.random.Generator) -> int | None:
        """Number of frames to keep; None when uncapped (fps sampling only)."""
        if self.max_num_frames <= 0:
            return None
        # compat="bagel": the reference draws the count from numpy's stream
        return as_random_source(rng).frame_count(self.min_num_frames, self.max_num_frames + 1)

    def _read_folder(self, path: str, rng: np.random.Generator) -> list[Image.Image]:
        try:
            if storage.is_uri(path):
                names = sort_frame_names(storage.list_dir(path))
            else:
                names = sort_frame_names(e.name for e in os.scandir(path) if e.is_file())
                _check_frames_inside(path, names)
        except OSError as err:
            raise VideoDecodeError(path, f"cannot list frame folder: {err}") from err
        if not names:
            raise VideoDecodeError(path, "frame folder holds no files")
        t = self._draw_count(rng)
        if t is None or len(names) > t:
            # input_fps stays 1.0: a folder carries no rate, as in the reference.
            keep = frame_indices(t or 0, len(names), self.sample, rng, max_num_frames=self.max_num_frames)
            names = [names[i] for i in keep]
        return [open_frame(path, storage.join(path, name)) for name in names]

    def _read_video(self, path: str, rng: np.random.Generator) -> list[Image.Image]:
        try:
            vlen, fps = _probe(path)
            t = self._draw_count(rng)
            keep = frame_indices(t or 0, vlen, self.sample, rng, input_fps=fps, max_num_frames=self.max_num_frames)
            # Upright in both modes: decord 0.6, the reference's reader, turns frames by the
            # display rotation too (checked pixel for pixel on 90, 180 and 270 degrees).
            try:
                return decode_frames(path, keep)
            except ShortStream as short:
                if not len(short.shown_pts):
                    raise
                # Fewer frames decode than the packets said: count again and draw again
                # from what does decode, rather than lose the row.
                vlen = _correct_count(path, short.shown_pts)
            keep = frame_indices(t or 0, vlen, self.sample, rng, input_fps=fps, max_num_frames=self.max_num_frames)
            return decode_frames(path, keep)
        except VideoDecodeError:
            raise
        except av.FFmpegError as err:  # FFmpeg's ENOMEM too: a damaged header's size, not this process's
            raise VideoDecodeError(path, f"{type(err).__name__}: {err}") from err
        except MemoryError:
            raise
        except Exception as err:  # OSError, and anything a bad stream raises
            raise VideoDecodeError(path, f"{type(err).__name__}: {err}") from err


def _check_frames_inside(folder: str, names: list[str]) -> None:
    """VideoDecodeError when a frame of the folder resolves outside it (a symlink out): the
    folder was checked against the dataset's roots, its frames must lie in it, as images do."""
    from .safe_read import is_under

    for name in names:
        if not is_under(os.path.join(folder, name), [folder]):
            raise VideoDecodeError(folder, f"frame {name!r} is a link to a file outside the frame folder")


# The two decoders below are the module's decode stages (bagel_data.instruments).
@seam("decode_frame")
def open_frame(folder: str, file: str) -> Image.Image:
    """One frame file of the frame folder `folder`, as RGB; VideoDecodeError if it cannot be read.
    Frames get the same pixel bound as images, checked on the header without Pillow's global."""
    from .images import DEFAULT_MAX_IMAGE_PIXELS
    from .safe_read import open_image

    try:
        with storage.open_input(file) as handle, open_image(handle, DEFAULT_MAX_IMAGE_PIXELS) as image:
            return image.convert("RGB")
    except ImageTooLargeError as err:
        raise VideoDecodeError(folder, f"frame {file!r}: {err}") from err
    except (VideoDecodeError, MemoryError):
        raise
    except Exception as err:  # OSError (missing, unidentified), and what Pillow's plugins raise
        raise VideoDecodeError(folder, f"cannot decode frame {file!r}: {type(err).__name__}: {err}") from err


def _probe(path: str) -> tuple[int, float]:
    """(frame count, average fps) of the first video stream, from its header or its packets."""
    table = _frame_table(path)
    if table.count <= 0:
        raise VideoDecodeError(path, "video stream holds no frames")
    return table.count, table.rate


def _correct_count(path: str, shown_pts: np.ndarray) -> int:
    """Keep, for `path`, the table of the frames that decoding showed; their number."""
    table = _frame_table(path)
    start = int(shown_pts[0])
    seek = table.seek_pts[(table.seek_pts >= start) & (table.seek_pts <= int(shown_pts[-1]))]
    _TABLES.put(_file_key(path), FrameTable(len(shown_pts), table.rate, shown_pts, seek))
    count_corrected()
    return len(shown_pts)


def _file_key(path: str) -> tuple:
    """What identifies a file's contents for the table cache. An object is known by its path
    alone: a replaced one whose timestamps moved fails its seeks' checks and is decoded from
    the start."""
    if storage.is_uri(path):
        return (path,)
    status = os.stat(path)
    return (os.path.realpath(path), status.st_size, status.st_mtime_ns)


def _frame_table(path: str) -> FrameTable:
    key = _file_key(path)
    table = _TABLES.get(key)
    if table is None:
        if storage.is_uri(path):
            with storage.open_input(path) as handle:
                table = shared_table(path, handle, lambda: probe_remote(handle, path))
        else:
            with _open_container(path) as container:
                table = probe_stream(container, video_stream(container, path))
        _TABLES.put(key, table)
    return table


@contextlib.contextmanager
def _open_container(path: str):
    """A PyAV container for a local path, or for a remote file through a file object, with
    the allowed demuxers only (video_open)."""
    if not storage.is_uri(path):
        with open_video(path, path) as container:
            yield container
        return
    with storage.open_input(path) as handle, open_video(handle, path) as container:
        yield container


@seam("decode_video")
def decode_frames(path: str, indices: list[int], *, upright: bool = True) -> list[Image.Image]:
    """The frames of the video at `path` at `indices` (repeats allowed): frame i is the i-th
    frame decoding from the first decodable packet shows, reached by seeking to the keyframe
    before it, and turned by the stream's display rotation when `upright`."""
    if not indices:
        return []
    table = _frame_table(path)
    with _open_container(path) as container:
        video_stream(container, path)  # the pixel bound, from the header, before any decoding
        return decode_at(lambda: _open_container(path), container, path, table, indices, upright=upright)
