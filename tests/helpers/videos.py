"""Small H.264 videos with the stream shapes that make seeking hard, for frame-equality tests.

Each frame shows a moving pattern, so a frame decoded against the wrong reference frames
differs in its pixels, not only in a mean.
"""

from __future__ import annotations

import fractions
import os

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
