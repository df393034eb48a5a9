"""Video as the reference reads it (`compat="bagel"`): with decord, where it is installed.

The reference decodes with decord 0.6.0 (`pip install "bagel-data[compat]"`), whose frame
choice and colour conversion differ from PyAV's exact decode on some streams (HEVC and
MPEG-4 part 2 seeks, the RGB conversion of 10-bit video). In compat mode a video file is
read here, in the reference's order:

1. open the file (decord's `VideoReader`); a file it cannot open is skipped with no draw;
2. draw the frame count (numpy's stream), then one position per segment (python's);
3. decode those frames; a failure here is a skip with the draws spent.

Without decord the file is read with PyAV (`media/video.py`) in the same order. Streams
decord is known to read otherwise get a `CompatVideoWarning` once per file, naming the
stream and the extra; AV1 streams and truncated files, which decord cannot open, are
skipped before any draw, as the reference skips them.

A frame folder is read as the reference reads it with or without decord: every frame is
decoded before anything is drawn (a bad frame skips the row with no draw), by any decoder
Pillow has, truncated frames as far as they go.
"""

from __future__ import annotations

import functools
import io
import os
import threading
import warnings
from types import ModuleType
from typing import Any

from PIL import Image

from ..errors import VideoDecodeError
from ..sources import storage
from .video import FrameSampler, frame_indices, sort_frame_names

DECORD_EXTRA = "bagel-data[compat]"
_WARNED: set[str] = set()
_WARN_LOCK = threading.Lock()


class CompatVideoWarning(UserWarning):
    """compat="bagel" reads a video without decord where decord is known to read it otherwise."""


@functools.cache
def decord_module() -> ModuleType | None:
    """decord when it is installed (the `compat` extra), else None; imported on first need."""
    try:
        import decord
    except ImportError:
        return None
    return decord


def read_reference_frames(sampler: FrameSampler, path: str, rng: Any) -> list[Image.Image]:
    """The frames the reference's `FrameSampler` gives for `path`, drawing from `rng` (the
    compat streams) in its order. Raises `VideoDecodeError` where it skips the row."""
    path = os.fspath(path)
    if path.endswith("/"):
        return _read_folder(sampler, path, rng)
    decord = decord_module()
    if decord is None:
        return _read_with_pyav(sampler, path, rng)
    return _read_with_decord(decord, sampler, path, rng)


def _draw_indices(sampler: FrameSampler, vlen: int, fps: float, rng: Any, path: str) -> list[int]:
    """The reference's draws: the count from numpy's stream (always, even for fps sampling),
    then the positions; fps sampling is never capped there."""
    count = _count(sampler, rng, path)
    try:
        return frame_indices(count, vlen, sampler.sample, rng, input_fps=fps, max_num_frames=-1)
    except ValueError as err:  # no frames: the reference fails here too, the count drawn
        raise VideoDecodeError(path, str(err)) from err


def _read_with_decord(decord: ModuleType, sampler: FrameSampler, path: str, rng: Any) -> list[Image.Image]:
    try:
        source: Any = io.BytesIO(storage.read_bytes(path)) if storage.is_uri(path) else path
        reader = decord.VideoReader(source, num_threads=1)
        vlen, fps = len(reader), float(reader.get_avg_fps())
    except Exception as err:  # decord's own error types, OSError
        raise VideoDecodeError(path, f"decord cannot open it: {_first_line(err)}") from err
    keep = _draw_indices(sampler, vlen, fps, rng, path)
    try:
        frames = reader.get_batch(keep).asnumpy()
    except Exception as err:
        raise VideoDecodeError(path, f"decord cannot decode frames {keep}: {_first_line(err)}") from err
    return [Image.fromarray(frame) for frame in frames]


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1][:200] if text else ''}"


# -- without decord ---------------------------------------------------------------------
def _read_with_pyav(sampler: FrameSampler, path: str, rng: Any) -> list[Image.Image]:
    stream = describe_stream(path)
    if stream is not None and stream.get("unopenable"):
        _warn_once(path, f"{stream['unopenable']}: the reference's decord cannot open it, so the row is skipped")
        raise VideoDecodeError(path, f"{stream['unopenable']}; decord, the reference's reader, cannot open it")
    if stream is not None and stream.get("differs"):
        _warn_once(path, f"{stream['differs']}: PyAV's frames differ from decord's there")
    return sampler(path, rng=rng)


def _warn_once(path: str, what: str) -> None:
    with _WARN_LOCK:
        if path in _WARNED:
            return
        _WARNED.add(path)
    warnings.warn(
        f'compat="bagel" without decord: {path}: {what}; install "{DECORD_EXTRA}" to read video as the reference does',
        CompatVideoWarning,
        stacklevel=3,
    )


def describe_stream(path: str) -> dict | None:
    """What decord is known to read otherwise in the first video stream of `path`: a dict
    with `differs` (a reason) or `unopenable` (a reason), empty when nothing is known; None
    when PyAV cannot open it either (the PyAV read then fails before any draw)."""
    try:
        key = (path,) if storage.is_uri(path) else (path, os.stat(path).st_size, os.stat(path).st_mtime_ns)
    except OSError:
        return None
    return _describe(key)


@functools.lru_cache(maxsize=4096)
def _describe(key: tuple) -> dict | None:
    import av

    path = key[0]
    try:
        with storage.open_input(path) as handle, av.open(handle, mode="r") as container:
            if not container.streams.video:
                return None
            stream = container.streams.video[0]
            packets = [packet for packet in container.demux(stream) if packet.size]
            codec = stream.codec_context.codec.canonical_name  # "av1" whichever decoder (libdav1d)
            pix_fmt = stream.codec_context.format.name if stream.codec_context.format else ""
    except Exception:  # av's errors: PyAV's own read will name it
        return None
    return classify(codec, pix_fmt, stream.frames, len(packets), bool(packets and packets[0].is_keyframe))


def classify(codec: str, pix_fmt: str, header_frames: int, packets: int, starts_on_keyframe: bool) -> dict:
    """The known differences between decord 0.6.0 and PyAV for a stream of this kind."""
    if codec == "av1":
        return {"unopenable": "AV1 stream"}
    if 0 < packets < header_frames:
        return {"unopenable": f"truncated file ({packets} of the {header_frames} frames its header lists)"}
    if codec == "hevc":
        return {"differs": "HEVC stream (decord's seeks return neighbouring frames)"}
    if codec == "mpeg4":
        return {"differs": "MPEG-4 part 2 stream (frames differ by a few levels)"}
    if pix_fmt and _bit_depth(pix_fmt) > 8:
        return {"differs": f"{codec} in {pix_fmt} (decord converts more than 8 bits to RGB otherwise)"}
    if packets and not starts_on_keyframe:
        return {"differs": f"{codec} stream that starts mid-GOP (decord returns frames; PyAV may not)"}
    return {}


def _bit_depth(pix_fmt: str) -> int:
    import av

    try:
        return max(component.bits for component in av.VideoFormat(pix_fmt).components)
    except Exception:  # an unknown format name
        return 8


# -- frame folders ------------------------------------------------------------------------
def _read_folder(sampler: FrameSampler, path: str, rng: Any) -> list[Image.Image]:
    from .images import DEFAULT_MAX_IMAGE_PIXELS
    from .reference_images import reference_formats
    from .safe_read import open_image

    try:
        names = storage.list_dir(path) if storage.is_uri(path) else [e.name for e in os.scandir(path) if e.is_file()]
    except OSError as err:
        raise VideoDecodeError(path, f"cannot list frame folder: {err}") from err
    frames = []
    for name in sort_frame_names(names):
        file = storage.join(path, name)
        try:
            with storage.open_input(file) as handle:
                data = io.BytesIO(handle.read())
            image = open_image(data, DEFAULT_MAX_IMAGE_PIXELS, reference_formats(), tolerant=True)
            frames.append(image.convert("RGB"))
        except MemoryError:
            raise
        except Exception as err:  # the reference fails on this frame before drawing anything
            raise VideoDecodeError(path, f"cannot decode frame {name!r}: {type(err).__name__}: {err}") from err
    if not frames:
        raise VideoDecodeError(path, "frame folder holds no files")
    count = _count(sampler, rng, path)
    if len(frames) <= count:
        return frames
    keep = frame_indices(count, len(frames), sampler.sample, rng)
    return [frames[i] for i in keep]


def _count(sampler: FrameSampler, rng: Any, path: str) -> int:
    try:
        return int(rng.frame_count(sampler.min_num_frames, sampler.max_num_frames + 1))
    except ValueError as err:
        raise VideoDecodeError(path, str(err)) from err
