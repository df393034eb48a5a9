"""Opening a video a row names, as untrusted input.

FFmpeg probes a file's format from its bytes, and some formats name other files: an HLS
playlist (`.m3u8`) reads segments from any path it lists and waits on a live one, a concat
list opens the files it names, an image sequence reads a numbered pattern. Only demuxers of
containers that hold their own packets are allowed, through FFmpeg's file protocol only (a
file object needs none), so a row never reads a file other than the one it names. Each
blocking read is bounded in time, and a stream whose header declares frames over the image
pixel bound is refused before any frame is decoded.
"""

from __future__ import annotations

import io
from typing import BinaryIO

import av

from ..errors import VideoDecodeError
from .images import DEFAULT_MAX_IMAGE_PIXELS

# FFmpeg's demuxer names: mp4/mov (with 3GP and Motion JPEG 2000), Matroska and WebM, AVI,
# MPEG transport and program streams, FLV, Ogg, IVF (VP8/VP9/AV1) and ASF (WMV).
CONTAINERS = (
    "mov", "mp4", "m4a", "3gp", "3g2", "mj2", "matroska", "webm",
    "avi", "mpegts", "mpeg", "flv", "ogg", "ivf", "asf",
)  # fmt: skip
# Seconds one blocking open or read may take (a FIFO, a stalled mount) before it is abandoned.
READ_TIMEOUT_S = 60.0
# A stream whose frames have more pixels than this is refused from its header: the image bound.
MAX_FRAME_PIXELS = DEFAULT_MAX_IMAGE_PIXELS

_OPTIONS = {"format_whitelist": ",".join(CONTAINERS), "protocol_whitelist": "file"}


def open_video(source: str | BinaryIO | io.RawIOBase, path: str) -> av.container.InputContainer:
    """`source` (the local path `path`, or a file object for it) opened with the allowed
    demuxers only; VideoDecodeError when it is none of them or cannot be read."""
    try:
        container = av.open(source, "r", options=dict(_OPTIONS), timeout=READ_TIMEOUT_S)
    except av.FFmpegError as err:
        allowed = "mp4/mov, Matroska/WebM, AVI, MPEG-TS/PS, FLV, Ogg, IVF, ASF"
        raise VideoDecodeError(path, f"cannot open as one of the video containers read ({allowed}): {err}") from err
    assert isinstance(container, av.container.InputContainer)  # mode "r"
    return container


def video_stream(container: av.container.InputContainer, path: str) -> av.VideoStream:
    """The first video stream, its declared frame size checked against MAX_FRAME_PIXELS."""
    if not container.streams.video:
        raise VideoDecodeError(path, "no video stream")
    stream = container.streams.video[0]
    width, height = stream.codec_context.width or 0, stream.codec_context.height or 0
    if width * height > MAX_FRAME_PIXELS:
        raise VideoDecodeError(
            path, f"frames of {width}x{height} are over the pixel limit ({MAX_FRAME_PIXELS}); none was decoded"
        )
    return stream
