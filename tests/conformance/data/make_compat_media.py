"""Writes the tiny media of `vlm/compat_media.jsonl` (the compat cases for images and video).

Run once with PyAV and Pillow (`python make_compat_media.py`); the files it wrote are
committed and are the cases' input (encoders are not bit-exact across versions, so a rerun
can give other bytes and then the expected outputs must be regenerated with the reference).
"""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
from PIL import Image

MEDIA = Path(__file__).resolve().parent / "vlm" / "media"


def pattern(width: int, height: int, shift: int = 0) -> np.ndarray:
    """A smooth colour pattern that moves with `shift` (codecs keep it small)."""
    y, x = np.mgrid[0:height, 0:width]
    red = (x * 7 + shift * 5) % 256
    green = (y * 5 + shift * 3) % 256
    blue = ((x + y) * 3 + shift * 11) % 256
    return np.stack([red, green, blue], axis=-1).astype(np.uint8)


def write_video(name, container_format, codec, pix_fmt, options, frames=24, size=32, container_options=None):
    path = MEDIA / name
    with av.open(str(path), "w", format=container_format, options=container_options or {}) as container:
        stream = container.add_stream(codec, rate=8, options=options)
        stream.width = stream.height = size
        stream.pix_fmt = pix_fmt
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(pattern(size, size, index), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def cut_into_first_gop(source: Path, target: Path) -> None:
    """A capture that starts mid-GOP: `source`'s packets from its fourth on, remuxed."""
    with av.open(str(source)) as before, av.open(str(target), "w", format="matroska") as after:
        stream = before.streams.video[0]
        copy = after.add_stream_from_template(stream)
        for packet in [packet for packet in before.demux(stream) if packet.size][3:]:
            packet.stream = copy
            after.mux(packet)


def noise(width: int, height: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def encode(image: Image.Image, image_format: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, image_format, **options)
    return buffer.getvalue()


def write_image(name: str, image_format: str, mode: str = "RGB", **options) -> bytes:
    data = encode(Image.fromarray(pattern(40, 30, 3)).convert(mode), image_format, **options)
    (MEDIA / name).write_bytes(data)
    return data


def main() -> None:
    MEDIA.mkdir(parents=True, exist_ok=True)
    gop = {"bf": "2", "g": "8", "crf": "40", "threads": "1"}
    write_video("h264.mp4", "mp4", "libx264", "yuv420p", gop)
    mkv = write_video("h264.mkv", "matroska", "libx264", "yuv420p", gop)
    cut_into_first_gop(mkv, MEDIA / "midgop.mkv")
    write_video("h264_10bit.mp4", "mp4", "libx264", "yuv420p10le", gop)
    hevc = {"crf": "40", "x265-params": "keyint=8:open-gop=1:bframes=3:frame-threads=1:log-level=none"}
    write_video("hevc.mp4", "mp4", "libx265", "yuv420p", hevc)
    write_video("mpeg4.avi", "avi", "mpeg4", "yuv420p", {"bf": "2", "g": "8", "qscale": "31"})
    write_video("av1.mp4", "mp4", "libsvtav1", "yuv420p", {"crf": "60"}, frames=8, size=64)
    # Index first (faststart), then cut: the header lists 24 frames, the file holds fewer.
    whole = write_video("cut.mp4", "mp4", "libx264", "yuv420p", gop, container_options={"movflags": "faststart"})
    data = whole.read_bytes()
    whole.write_bytes(data[: len(data) * 4 // 5])
    # Noise, so that the cut falls in the entropy-coded data, past the tables of the header.
    jpeg = encode(Image.fromarray(noise(40, 30, 4)), "JPEG", quality=90)
    (MEDIA / "cut.jpg").write_bytes(jpeg[: len(jpeg) * 2 // 3])
    png = encode(Image.fromarray(noise(24, 24, 5)), "PNG")
    (MEDIA / "cut.png").write_bytes(png[: len(png) * 2 // 3])
    write_image("image.jp2", "JPEG2000")
    write_image("image.ppm", "PPM")
    write_image("image.tga", "TGA")
    write_image("image.ico", "ICO", sizes=[(24, 24)])
    write_image("image.avif", "AVIF", quality=50)
    write_image("image.sgi", "SGI")
    write_image("image.pcx", "PCX")
    folder = MEDIA / "frames_cut"
    folder.mkdir(exist_ok=True)
    for index in range(6):
        data = encode(Image.fromarray(noise(24, 24, index)), "JPEG", quality=90)
        (folder / f"f_{index}.jpg").write_bytes(data[: len(data) * 3 // 4] if index == 2 else data)


if __name__ == "__main__":
    main()
