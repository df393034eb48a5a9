"""Videos a row names are untrusted (issue 47): only containers that hold their own packets
are opened, no file other than the one named is read, frames over the pixel bound are
refused from the header, absurd timing is a counted skip, not a fatal MemoryError."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from PIL import Image

from bagel_data.errors import VideoDecodeError
from bagel_data.media import video
from bagel_data.media.video_decode import decode_counts
from helpers.videos import has_x264, make_h264

pytestmark = pytest.mark.skipif(not has_x264(), reason="this PyAV wheel has no libx264")
SAMPLER = video.FrameSampler(max_num_frames=2, min_num_frames=2, sample="middle")


@pytest.fixture
def outside(tmp_path):
    """A folder beside the data root, with a video and a segment a playlist could name."""
    folder = tmp_path / "outside"
    folder.mkdir()
    make_h264(folder / "secret.ts", 24)
    make_h264(folder / "secret.mp4", 24)
    return folder


@pytest.mark.parametrize(
    "name, text",
    [
        ("evil.m3u8", "#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:1.0,\n{outside}/secret.ts\n#EXT-X-ENDLIST\n"),
        ("live.m3u8", "#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:1.0,\n../outside/secret.ts\n"),  # no end tag
        ("evil.ffconcat", "ffconcat version 1.0\nfile {outside}/secret.mp4\n"),
    ],
)
def test_playlists_and_concat_lists_never_open_the_files_they_name(tmp_path, outside, name, text):
    root = tmp_path / "data"
    root.mkdir()
    (root / name).write_text(text.format(outside=outside))
    with pytest.raises(VideoDecodeError, match="cannot open as one of the video containers"):
        SAMPLER(str(root / name), np.random.default_rng(0))


def test_an_image_sequence_pattern_is_not_read(tmp_path):
    for i in range(1, 4):
        Image.new("RGB", (16, 16), (i * 40, 0, 0)).save(tmp_path / f"img{i:03d}.jpg")
    with pytest.raises(VideoDecodeError):
        SAMPLER(str(tmp_path / "img%03d.jpg"), np.random.default_rng(0))


def test_the_allowed_containers_still_open(tmp_path):
    for suffix in ("mp4", "mkv", "ts", "avi"):
        path = make_h264(tmp_path / f"clip.{suffix}", 24, bframes=0)
        assert len(SAMPLER(path, np.random.default_rng(0))) == 2


def test_frame_folder_symlinks_out_of_the_folder_are_refused(tmp_path):
    secret = tmp_path / "secret.jpg"
    Image.new("RGB", (16, 16)).save(secret)
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(3):
        Image.new("RGB", (16, 16)).save(folder / f"f_{i}.jpg")
    os.symlink(secret, folder / "f_3.jpg")
    with pytest.raises(VideoDecodeError, match="outside the frame folder"):
        SAMPLER(str(folder) + "/", np.random.default_rng(0))
    os.unlink(folder / "f_3.jpg")
    os.symlink(folder / "f_0.jpg", folder / "f_3.jpg")  # a link inside the folder is fine
    assert len(SAMPLER(str(folder) + "/", np.random.default_rng(0))) == 2


def test_frames_over_the_pixel_bound_are_refused_before_decoding(tmp_path, monkeypatch):
    path = make_h264(tmp_path / "big.mp4", 24)  # 96x64: over a bound of 96*64 - 1
    monkeypatch.setattr("bagel_data.media.video_open.MAX_FRAME_PIXELS", 96 * 64 - 1)
    video._TABLES.clear()
    before = decode_counts().get("frames_decoded", 0)
    with pytest.raises(VideoDecodeError, match="96x64 are over the pixel limit"):
        SAMPLER(path, np.random.default_rng(0))
    assert decode_counts().get("frames_decoded", 0) == before
    monkeypatch.setattr("bagel_data.media.video_open.MAX_FRAME_PIXELS", 96 * 64)
    assert len(SAMPLER(path, np.random.default_rng(0))) == 2  # at the bound: read


def test_an_absurd_frame_rate_is_a_video_error_not_a_memory_error(tmp_path):
    path = make_h264(tmp_path / "clip.mkv", 96)  # 4 s at 24 fps
    video._TABLES.clear()
    table = video._frame_table(path)
    video._TABLES.put(video._file_key(path), dataclasses.replace(table, rate=4.7e-10))  # a patched rate
    sampler = video.FrameSampler(sample="fps0.5")
    with pytest.raises(VideoDecodeError, match="timing is absurd"):
        sampler(path, np.random.default_rng(0))
    video._TABLES.clear()
    assert len(sampler(path, np.random.default_rng(0))) == 2  # 4 s at 0.5 fps: instants at 1 s and 3 s


def test_a_demux_past_its_time_budget_is_a_video_error(tmp_path, monkeypatch):
    path = make_h264(tmp_path / "clip.mkv", 24)
    monkeypatch.setattr("bagel_data.media.video_probe.DEMUX_BUDGET_S", -1.0)  # spent before it starts
    video._TABLES.clear()
    with pytest.raises(VideoDecodeError, match="demuxing took over"):
        SAMPLER(path, np.random.default_rng(0))


def test_a_webm_opens_and_a_missing_file_is_a_named_video_error(tmp_path):
    import av

    from bagel_data.media.video_open import open_video

    path = str(tmp_path / "clip.webm")
    with av.open(path, "w") as out:
        stream = out.add_stream("libvpx", rate=8)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i in range(8):
            frame = av.VideoFrame.from_ndarray(np.full((32, 32, 3), i * 30, np.uint8), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    with open_video(path, path) as container:
        assert container.format.name.startswith("matroska")
    with pytest.raises(VideoDecodeError, match="cannot open"):
        open_video(str(tmp_path / "missing.mp4"), str(tmp_path / "missing.mp4"))


def test_a_decode_past_its_time_budget_is_a_counted_skip_of_its_own(tmp_path, monkeypatch):
    import av

    from bagel_data.errors import SkipReason, VideoDecodeOverTime
    from bagel_data.families.media import skip_reason
    from bagel_data.media import video_decode

    path = make_h264(tmp_path / "clip.mkv", 48)
    video._TABLES.clear()
    monkeypatch.setattr(video_decode, "DECODE_BUDGET_S", -1.0)  # any decode is over it
    with pytest.raises(VideoDecodeOverTime, match="decoding took over -1.0 s") as caught:
        video.decode_frames(path, [3, 30])  # by seeking
    assert skip_reason(caught.value) == SkipReason.VIDEO_DECODE_OVER_TIME
    table = dataclasses.replace(video._frame_table(path), seek_pts=np.zeros(0, np.int64))  # no seek point
    with pytest.raises(VideoDecodeOverTime), av.open(path) as container:  # so, from the start
        video_decode.decode_at(lambda: av.open(path), container, path, table, [3])
    with pytest.raises(VideoDecodeOverTime):
        SAMPLER(path, np.random.default_rng(0))  # the sampler lets it through, to be counted
    monkeypatch.setattr(video_decode, "DECODE_BUDGET_S", 300.0)
    assert len(video.decode_frames(path, [3, 30])) == 2
