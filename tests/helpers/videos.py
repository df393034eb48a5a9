"""Small H.264 videos with the stream shapes that make seeking hard, for frame-equality tests.

Each frame shows a moving pattern, so a frame decoded against the wrong reference frames
differs in its pixels, not only in a mean.
"""

from __future__ import annotations

import fractions
import os
import struct

import av
import numpy as np

WIDTH, HEIGHT = 96, 64


def has_x264() -> bool:
    return "libx264" in av.codecs_available


def _picture(i: int) -> np.ndarray:
    rows, cols = np.mgrid[0:HEIGHT, 0:WIDTH]
    base = ((cols * 5 + rows * 3 + i * 7) % 256).astype(np.uint8)
    block = ((cols // 8 + rows // 8 + i) % 2 * 255).astype(np.uint8)
    return np.stack([base, block, np.full_like(base, (i * 11) % 256)], -1)


def make_h264(
    path: os.PathLike | str,
    num_frames: int = 90,
    *,
    gop: int = 12,
    bframes: int = 2,
    open_gop: bool = False,
    rate: int = 24,
    first_pts: int = 0,
    frame_steps: list[int] | None = None,
) -> str:
    """An H.264 video at `path` (the suffix picks the container).

    `first_pts` shifts every timestamp (negative: the mp4 muxer writes an edit list that
    trims the start); `frame_steps` gives each frame's duration in ticks of 1/rate/4,
    making the frame rate variable.
    """
    params = f"keyint={gop}:min-keyint={gop}:scenecut=0:bframes={bframes}:open-gop={int(open_gop)}"
    tick = fractions.Fraction(1, rate * 4)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"preset": "ultrafast" if not bframes else "veryfast", "x264-params": params}
        stream.codec_context.time_base = tick
        pts = first_pts
        for i in range(num_frames):
            frame = av.VideoFrame.from_ndarray(_picture(i), format="rgb24")
            frame.pts, frame.time_base = pts, tick
            pts += frame_steps[i % len(frame_steps)] if frame_steps else 4
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


def truncate(path: str, keep_fraction: float) -> str:
    """Cut the file at `keep_fraction` of its bytes: a damaged tail, as a broken upload leaves."""
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        handle.truncate(int(size * keep_fraction))
    return path


def make_video(
    path: os.PathLike | str,
    num_frames: int = 48,
    *,
    codec: str = "libx264",
    params: str = "keyint=12:min-keyint=12:scenecut=0:bframes=2",
    mux_options: dict[str, str] | None = None,
) -> str:
    """A 64x64 video at `path` from `codec` with its encoder's `params` (x264 or x265
    syntax), muxed with `mux_options` (e.g. mp4's movflags for fragments or faststart)."""
    with av.open(str(path), "w", options=mux_options or {}) as container:
        stream = container.add_stream(codec, rate=24)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        key = "x265-params" if codec == "libx265" else "x264-params"
        stream.options = {"preset": "ultrafast" if codec == "libx265" else "veryfast", key: params}
        if codec == "libx265":
            stream.options[key] += ":log-level=error"
        for i in range(num_frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(_picture(i)[:64, :64]), format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


def drop_leading_packets(source: str, target: os.PathLike | str, drop: int) -> str:
    """`source` remuxed to `target` without its first `drop` packets: a capture that began
    mid-GOP, whose first packets reference frames it never recorded."""
    with av.open(source) as reader, av.open(str(target), "w") as writer:
        stream = reader.streams.video[0]
        out = writer.add_stream_from_template(stream)
        kept = 0
        for packet in reader.demux(stream):
            if not packet.size:
                continue
            kept += 1
            if kept > drop:
                packet.stream = out
                writer.mux(packet)
    return str(target)


_ONE = 1 << 16  # 16.16 fixed point, as an mp4 track header's matrix holds it
# Clockwise turns a player makes -> the track matrix's (a, b, c, d), as phones write them.
_MATRICES = {90: (0, _ONE, -_ONE, 0), 180: (-_ONE, 0, 0, -_ONE), 270: (0, -_ONE, _ONE, 0)}


def rotate_mp4(path: str, clockwise: int) -> str:
    """Set the display matrix of the mp4 at `path` (its first track header) so that players
    turn its frames `clockwise` degrees: a phone's portrait video is stored this way."""
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    at = data.find(b"tkhd")
    # size+type, version+flags, 3 or 5 times, reserved, duration, reserved, layer ... volume
    times = 32 if data[at + 4] == 1 else 20
    matrix = at + 4 + 4 + times + 8 + 8
    a, b, c, d = _MATRICES[clockwise]
    struct.pack_into(">9i", data, matrix, a, b, 0, c, d, 0, 0, 0, 1 << 30)
    with open(path, "wb") as handle:
        handle.write(bytes(data))
    return path


def decode_all(path: str) -> list[tuple[int, np.ndarray, float]]:
    """(pts, RGB pixels, display rotation) of each frame decoding `path` from the start
    shows, in display order, going on past packets the decoder refuses (a cut tail)."""
    shown = []
    with av.open(path) as container:
        stream = container.streams.video[0]
        for packet in container.demux(stream):
            try:
                frames = packet.decode()
            except av.error.InvalidDataError:
                continue
            shown += [(frame.pts, frame.to_ndarray(format="rgb24"), frame.rotation) for frame in frames]
    return shown
