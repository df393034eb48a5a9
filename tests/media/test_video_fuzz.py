"""A seeded byte-flipper over small mp4 and Matroska files, headers first: every damaged
file gives the sampler's frames or a VideoDecodeError (a counted skip), never another
exception, and never a frame of another shape than the stream's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bagel_data.errors import VideoDecodeError
from bagel_data.media import video
from helpers.videos import has_x264, make_h264

pytestmark = pytest.mark.skipif(not has_x264(), reason="this PyAV wheel has no libx264")
ROUNDS = 200  # per container: about 5 s each, bounded


def _damaged(raw: bytes, rng: np.random.Generator) -> bytes:
    data = bytearray(raw)
    head = min(len(data), 4096)  # headers and indexes (mp4 faststart, Matroska's EBML and tracks)
    for _ in range(int(rng.integers(1, 6))):
        where = int(rng.integers(0, head)) if rng.random() < 0.7 else int(rng.integers(0, len(data)))
        data[where] = int(rng.integers(0, 256))
    if rng.random() < 0.2:
        del data[int(rng.integers(len(data) // 2, len(data))) :]  # and a cut tail
    return bytes(data)


@pytest.mark.parametrize("suffix", ["mp4", "mkv"])
def test_damaged_headers_give_frames_or_a_video_error(tmp_path, suffix):
    source = make_h264(tmp_path / f"clean.{suffix}", 36, gop=12, bframes=2)
    if suffix == "mp4":  # the index before the packets, where the flips land
        source = _faststart(source, tmp_path / "fast.mp4")
    raw = Path(source).read_bytes()
    rng = np.random.default_rng(50)
    sampler = video.FrameSampler(max_num_frames=4, min_num_frames=2)
    outcomes = {"frames": 0, "skipped": 0}
    for round_ in range(ROUNDS):
        path = tmp_path / f"damaged-{round_}.{suffix}"
        path.write_bytes(_damaged(raw, rng))
        video._TABLES.clear()
        try:
            frames = sampler(str(path), np.random.default_rng(round_))
        except VideoDecodeError:
            outcomes["skipped"] += 1
            continue
        assert 2 <= len(frames) <= 4
        assert len({frame.size for frame in frames}) == 1 and all(frame.mode == "RGB" for frame in frames)
        outcomes["frames"] += 1
    assert outcomes["frames"] and outcomes["skipped"], outcomes  # both kinds of outcome were met


def _faststart(source: str, target: Path) -> str:
    import av

    with av.open(source) as reader, av.open(str(target), "w", options={"movflags": "faststart"}) as writer:
        inner = reader.streams.video[0]
        outer = writer.add_stream_from_template(inner)
        for packet in reader.demux(inner):
            if packet.dts is not None:
                packet.stream = outer
                writer.mux(packet)
    return str(target)
