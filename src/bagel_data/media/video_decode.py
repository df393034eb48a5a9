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
import time
from collections.abc import Callable, Iterator

import av
import numpy as np
from PIL import Image

from ..errors import VideoDecodeError, VideoDecodeOverTime
from .video_probe import FrameTable

logger = logging.getLogger("bagel_data")

OpenContainer = Callable[[], contextlib.AbstractContextManager[av.container.InputContainer]]

# The longest one request's frames may take to decode (its seeks, or its decode from the
# start): a stream that decodes slowly frame after frame (huge frames of a crafted codec
# setting, a file that grows) is a counted skip, not a worker held for hours. The demux has
# its own budget (video_probe.DEMUX_BUDGET_S), each blocking read FFmpeg's timeout.
DECODE_BUDGET_S = 300.0

_COUNTS: collections.Counter[str] = collections.Counter()
_COUNTS_LOCK = threading.Lock()


def decode_counts() -> dict[str, int]:
    """How this process decoded: `frames_decoded`, `seeks` made, `seeked` requests served by
    seeking, `from_start:<reason>` for each request decoded from the start, by reason,
    `packets_undecodable` (passed over) and `count_corrected` (a sampler drew again from
    the frames a decode found, fewer than its table held)."""
    with _COUNTS_LOCK:
        return dict(_COUNTS)


def count_corrected() -> None:
    """A sampler drew again after a decode found fewer frames than the table held."""
    _count("count_corrected")


def _count(key: str, amount: int = 1) -> None:
    with _COUNTS_LOCK:
        _COUNTS[key] += amount


class ShortStream(VideoDecodeError):
    """Decoding from the start showed fewer frames than the table holds (a packet the
    demuxer passed whole but the decoder refuses); `shown_pts` are the table's timestamps
    it did show, the stream's frames as decoding finds them."""

    def __init__(self, path: str, reason: str, shown_pts: np.ndarray | None = None):
        super().__init__(path, reason)
        self.shown_pts = np.zeros(0, np.int64) if shown_pts is None else shown_pts


class _Untrusted(Exception):
    """Seeking cannot give this request's frames; the reason says why."""


def decode_at(
    open_container: OpenContainer,
    container: av.container.InputContainer,
    path: str,
    table: FrameTable,
    indices: list[int],
    *,
    upright: bool = True,
) -> list[Image.Image]:
    """The frames at `indices` (repeats allowed) of the first video stream of `container`
    (just opened, nothing read yet), turned by the stream's display rotation when `upright`."""
    if not indices:
        return []
    _one_thread(container)
    deadline = time.monotonic() + DECODE_BUDGET_S
    found: dict[int, Image.Image]
    try:
        found = _decode_seeking(container, table, sorted(set(indices)), upright, (path, deadline))
        _count("seeked")
    except _Untrusted as reason:
        _count(f"from_start:{reason}")
        logger.debug("decoding %s from the start: %s", path, reason)
        with open_container() as fresh:
            _one_thread(fresh)
            found = decode_from_start(fresh, path, set(indices), table.frame_pts, upright=upright, deadline=deadline)
    return _in_order(found, indices)


def _one_thread(container: av.container.InputContainer) -> None:
    """Decode on the calling thread, as decord does for the reference (`num_threads=1`): a
    sample's few GOPs give slice threads little to share, and their hand-offs cost CPU
    (about 15 % on x265's wavefront streams); a loader's workers are the parallelism."""
    if container.streams.video:
        container.streams.video[0].thread_count = 1


def _decode_seeking(
    container: av.container.InputContainer,
    table: FrameTable,
    wanted: list[int],
    upright: bool,
    budget: tuple[str, float] = ("", float("inf")),
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
    floor = 0  # frames before the keyframe decoding started from are its leading pictures
    for target in sorted(index_of):
        start = table.seek_point(target)
        if start is None:
            raise _Untrusted("no safe keyframe before a wanted frame")
        if frames is None and start == table.seek_pts[0]:
            # The stream's first keyframe: read on from the top of the just-opened file.
            # (Seeking to it can fail where packets that never decode come before it.)
            frames, floor = _frames_from_top(container, stream), start
        elif frames is None or position is None or start > position:
            frames, floor = _frames_after_seek(container, stream, start, table), start
        for frame in frames:
            _in_time(*budget)
            if frame.pts is None:
                raise _Untrusted("decoded frame without a timestamp")
            if frame.pts < floor:
                continue  # a leading picture of an open GOP: its references came before the seek
            position = frame.pts
            if position in index_of:
                found[index_of[position]] = upright_image(frame, upright)
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
        yield from _decoded(packet)


def _frames_from_top(container: av.container.InputContainer, stream: av.VideoStream) -> Iterator[av.VideoFrame]:
    for packet in container.demux(stream):
        yield from _decoded(packet)


def _decoded(packet: av.Packet) -> list[av.VideoFrame]:
    """The frames decoding `packet` gives; none for a packet the decoder refuses (a
    truncated last packet, a damaged one): decoding goes on, as players do."""
    try:
        frames = packet.decode()
    except av.error.InvalidDataError:
        _count("packets_undecodable")
        return []
    _count("frames_decoded", len(frames))
    return frames


def decode_from_start(
    container: av.container.InputContainer,
    path: str,
    wanted: set[int],
    frame_pts: np.ndarray | None = None,
    *,
    upright: bool = True,
    deadline: float = float("inf"),
) -> dict[int, Image.Image]:
    """Frame i is the frame with the i-th timestamp of `frame_pts`, the stream's table, so
    frames a decoder outputs that decoding from the start would not show are never
    counted. Without a table, frame i is the i-th frame decoding outputs."""
    if not container.streams.video:
        raise VideoDecodeError(path, "no video stream")
    last = max(wanted)
    if frame_pts is not None and last >= len(frame_pts):
        raise VideoDecodeError(path, f"frame {last} is past the stream's {len(frame_pts)} frames")
    stream = container.streams.video[0]
    found: dict[int, Image.Image] = {}
    if frame_pts is not None:
        index_of = {int(frame_pts[i]): i for i in wanted}
        last_pts = max(index_of)
    shown: list[int] = []  # timestamps (or, without a table, numbers) of the frames decoding showed
    for packet in container.demux(stream):
        _in_time(path, deadline)
        for frame in _decoded(packet):
            if frame_pts is None:
                at = len(shown)
                shown.append(at)
                if at in wanted and at <= last:
                    found[at] = upright_image(frame, upright)
                done = at >= last
            else:
                if frame.pts is not None:
                    shown.append(frame.pts)
                if frame.pts in index_of and index_of[frame.pts] not in found:
                    found[index_of[frame.pts]] = upright_image(frame, upright)
                done = frame.pts is not None and frame.pts >= last_pts
            if done and len(found) == len(wanted):
                return found
            # Past the last wanted frame with one missing: decode on to the end, so that the
            # error tells every frame that does show (the count is corrected from it).
    return found if len(found) == len(wanted) else _short(found, wanted, path, shown, frame_pts)


def _in_time(path: str, deadline: float) -> None:
    """VideoDecodeOverTime once `deadline` (time.monotonic) has passed."""
    if time.monotonic() > deadline:
        raise VideoDecodeOverTime(path, f"decoding took over {DECODE_BUDGET_S} s (DECODE_BUDGET_S)")


def _short(found: dict, wanted: set[int], path: str, shown: list[int], frame_pts: np.ndarray | None) -> dict:
    """The ShortStream error for a decode that ended without every wanted frame."""
    missing = min(wanted - set(found))
    reason = f"stream metadata promised frame {missing} but decoding stopped before it"
    if frame_pts is None:
        raise ShortStream(path, reason)
    raise ShortStream(path, reason, frame_pts[np.isin(frame_pts, np.asarray(shown, np.int64))])


# The display rotation, counter-clockwise as FFmpeg gives it (a phone's portrait video says
# -90: turn clockwise), is the turn Pillow makes, which is counter-clockwise too.
_TURNS = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}


def upright_image(frame: av.VideoFrame, upright: bool = True) -> Image.Image:
    """The frame as an RGB image, turned by the display rotation its stream declares (a
    phone's portrait video is stored landscape with a 90-degree display matrix) when
    `upright` (as players and decord show it); as stored otherwise."""
    image = frame.to_image()
    degrees = round(getattr(frame, "rotation", 0) or 0) % 360 if upright else 0
    turn = _TURNS.get(degrees)
    return image if turn is None else image.transpose(turn)


def _in_order(found: dict[int, Image.Image], indices: list[int]) -> list[Image.Image]:
    # Repeated (padded) indices get their own copy: in-place edits such as thumbnail()
    # on one list entry must not change another.
    images, used = [], set()
    for i in indices:
        images.append(found[i].copy() if i in used else found[i])
        used.add(i)
    return images
