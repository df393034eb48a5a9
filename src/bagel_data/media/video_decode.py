"""Decoding the frames a sampler chose, at the cost of those frames and not of the video.

For each wanted frame (in presentation order) the decoder seeks to the last safe keyframe
at or before it, unless it has already decoded past that keyframe: then decoding on is
the shorter way. Frames are known by their presentation timestamps, so the result is the
frame decoding from the start gives at that index. When a seek cannot be trusted (it
lands elsewhere than asked, a stream has no safe keyframe before a wanted frame, or the
decoder skips a wanted timestamp), the whole request is decoded from the start instead,
and `decode_counts()` counts it with its reason.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

import av
from PIL import Image

from ..errors import VideoDecodeError
from .video_probe import FrameTable

logger = logging.getLogger("bagel_data")

OpenContainer = Callable[[], contextlib.AbstractContextManager[av.container.InputContainer]]

_COUNTS: collections.Counter[str] = collections.Counter()
_COUNTS_LOCK = threading.Lock()


def decode_counts() -> dict[str, int]:
    """How this process decoded: `frames_decoded`, `seeks` made, `seeked` requests served by
    seeking, and `from_start:<reason>` for each request decoded from the start, by reason."""
    with _COUNTS_LOCK:
        return dict(_COUNTS)


def _count(key: str, amount: int = 1) -> None:
    with _COUNTS_LOCK:
        _COUNTS[key] += amount


class _Untrusted(Exception):
    """Seeking cannot give this request's frames; the reason says why."""


def decode_at(
    open_container: OpenContainer,
    container: av.container.InputContainer,
    path: str,
    table: FrameTable,
    indices: list[int],
) -> list[Image.Image]:
    """The frames at `indices` (repeats allowed) of the first video stream of `container`."""
    if not indices:
        return []
    found: dict[int, Image.Image]
    try:
        found = _decode_seeking(container, table, sorted(set(indices)))
        _count("seeked")
    except _Untrusted as reason:
        _count(f"from_start:{reason}")
        logger.debug("decoding %s from the start: %s", path, reason)
        with open_container() as fresh:
            found = decode_from_start(fresh, path, set(indices))
    return _in_order(found, indices)


def _decode_seeking(
    container: av.container.InputContainer, table: FrameTable, wanted: list[int]
) -> dict[int, Image.Image]:
    if table.frame_pts is None:
        raise _Untrusted("packets without timestamps")
    if wanted[-1] >= len(table.frame_pts):
        raise _Untrusted("frame past the demuxed packets")
    stream = container.streams.video[0]
    index_of = {int(table.frame_pts[i]): i for i in wanted}
    found: dict[int, Image.Image] = {}
    frames: Iterator[av.VideoFrame] | None = None
    position: int | None = None  # timestamp of the last frame the decoder gave
    for target in sorted(index_of):
        start = table.seek_point(target)
        if start is None:
            raise _Untrusted("no safe keyframe before a wanted frame")
        if frames is None or position is None or start > position:
            frames = _frames_after_seek(container, stream, start, table)
        for frame in frames:
            position = frame.pts
            if position is None:
                raise _Untrusted("decoded frame without a timestamp")
            if position in index_of:
                found[index_of[position]] = frame.to_image()
            if position >= target:
                break
        if index_of[target] not in found:
            raise _Untrusted("the decoder skipped a wanted frame")
    return found


def _frames_after_seek(
    container: av.container.InputContainer, stream: av.VideoStream, start: int, table: FrameTable
) -> Iterator[av.VideoFrame]:
    """Frames decoded on from the safe keyframe `start`, after checking the seek landed on
    a safe keyframe no later than it."""
    container.seek(start, stream=stream, backward=True, any_frame=False)
    _count("seeks")
    landed = False
    for packet in container.demux(stream):
        if not landed and packet.size:
            if not packet.is_keyframe or packet.pts is None or packet.pts > start:
                raise _Untrusted("a seek landed off its keyframe")
            if table.seek_point(packet.pts) != packet.pts:
                raise _Untrusted("a seek landed on an unsafe keyframe")
            landed = True
        for frame in packet.decode():
            _count("frames_decoded")
            yield frame


def decode_from_start(container: av.container.InputContainer, path: str, wanted: set[int]) -> dict[int, Image.Image]:
    """Frame i is the i-th frame decoding outputs, as in every decoder that reads on."""
    if not container.streams.video:
        raise VideoDecodeError(path, "no video stream")
    last = max(wanted)
    found: dict[int, Image.Image] = {}
    for i, frame in enumerate(container.decode(container.streams.video[0])):
        _count("frames_decoded")
        if i in wanted:
            found[i] = frame.to_image()
        if i >= last:
            break
    if len(found) < len(wanted):
        raise VideoDecodeError(path, f"stream metadata promised frame {last} but decoding stopped before it")
    return found


def _in_order(found: dict[int, Image.Image], indices: list[int]) -> list[Image.Image]:
    # Repeated (padded) indices get their own copy: in-place edits such as thumbnail()
    # on one list entry must not change another.
    images, used = [], set()
    for i in indices:
        images.append(found[i].copy() if i in used else found[i])
        used.add(i)
    return images
