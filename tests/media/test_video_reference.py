"""compat="bagel" reads video as the reference does (media/video_reference.py): with decord
where installed, else PyAV with a warning per stream decord reads otherwise, and in the
reference's order of draws (open, then draw, then decode)."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import numpy as np
import pytest

from bagel_data.compat.streams import CompatRandom
from bagel_data.errors import VideoDecodeError
from bagel_data.media import video_reference
from bagel_data.media.video import FrameSampler, decode_frames
from bagel_data.media.video_reference import CompatVideoWarning, classify, describe_stream, read_reference_frames

MEDIA = Path(__file__).resolve().parents[1] / "conformance" / "data" / "vlm" / "media"
SAMPLER = FrameSampler(max_num_frames=8, min_num_frames=4)
needs_decord = pytest.mark.skipif(
    video_reference.decord_module() is None, reason='decord is not installed: pip install "bagel-data[compat]"'
)


def reference_picks(twin: CompatRandom, vlen: int = 24) -> list[int]:
    """The reference's draws for SAMPLER over `vlen` frames, written out: the count from
    numpy's stream, then `random.choice(range(start, end - 1))` per segment."""
    count = twin.frame_count(4, 9)
    bounds = np.linspace(0, vlen, count + 1).astype(int)
    return [twin.py.choice(range(int(a), int(b) - 1)) for a, b in itertools.pairwise(bounds)]


@pytest.fixture
def without_decord(monkeypatch):
    monkeypatch.setattr(video_reference, "decord_module", lambda: None)
    monkeypatch.setattr(video_reference, "_WARNED", set())


def test_the_known_differences_by_codec_pixel_format_and_file():
    assert classify("av1", "yuv420p", 8, 8, True) == {"unopenable": "AV1 stream"}
    assert "truncated" in classify("h264", "yuv420p", 24, 12, True)["unopenable"]
    assert "HEVC" in classify("hevc", "yuv420p", 24, 24, True)["differs"]
    assert "MPEG-4 part 2" in classify("mpeg4", "yuv420p", 24, 24, True)["differs"]
    assert "yuv420p10le" in classify("h264", "yuv420p10le", 24, 24, True)["differs"]
    assert "mid-GOP" in classify("h264", "yuv420p", 0, 24, False)["differs"]
    assert classify("h264", "yuv420p", 24, 24, True) == {}
    assert classify("vp9", "yuv420p", 0, 24, True) == {}  # no header count (webm): the packets are it


@pytest.mark.parametrize(
    ("name", "key"),
    [("av1.mp4", "unopenable"), ("cut.mp4", "unopenable"), ("hevc.mp4", "differs"), ("mpeg4.avi", "differs"),
     ("h264_10bit.mp4", "differs"), ("midgop.mkv", "differs"), ("h264.mp4", None), ("h264.mkv", None)],
)  # fmt: skip
def test_each_conformance_stream_is_described(name, key):
    described = describe_stream(str(MEDIA / name))
    assert list(described) == ([key] if key else [])


@pytest.mark.parametrize("name", ["av1.mp4", "cut.mp4"])
def test_without_decord_a_file_decord_cannot_open_is_skipped_before_any_draw(without_decord, name):
    rng = CompatRandom(7, 7)
    before = rng.get_state()
    with pytest.warns(CompatVideoWarning, match=r"bagel-data\[compat\]") as caught:
        with pytest.raises(VideoDecodeError, match="decord"):
            read_reference_frames(SAMPLER, str(MEDIA / name), rng)
    assert name in str(caught[0].message)
    assert rng.get_state() == before  # the next row draws what the reference's next row draws


def test_without_decord_a_differing_stream_warns_once_naming_it_and_the_extra(without_decord):
    path = str(MEDIA / "hevc.mp4")
    with pytest.warns(CompatVideoWarning) as caught:
        frames = read_reference_frames(SAMPLER, path, CompatRandom(7, 7))
    assert 4 <= len(frames) <= 8
    message = str(caught[0].message)
    assert "hevc.mp4" in message and "HEVC" in message and "bagel-data[compat]" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_reference_frames(SAMPLER, path, CompatRandom(8, 8))  # once per file
        read_reference_frames(SAMPLER, str(MEDIA / "h264.mp4"), CompatRandom(7, 7))  # matches: no warning


def test_without_decord_frames_are_pyavs_drawn_in_the_references_order(without_decord):
    rng, twin = CompatRandom(3, 3), CompatRandom(3, 3)
    frames = read_reference_frames(SAMPLER, str(MEDIA / "h264.mp4"), rng)
    picks = reference_picks(twin)
    expected = decode_frames(str(MEDIA / "h264.mp4"), picks)
    assert [np.asarray(f).tobytes() for f in frames] == [np.asarray(f).tobytes() for f in expected]
    assert rng.get_state() == twin.get_state()


def test_a_frame_folder_is_decoded_whole_before_the_draws_truncated_frame_included(tmp_path):
    rng = CompatRandom(5, 5)
    frames = read_reference_frames(
        FrameSampler(max_num_frames=8, min_num_frames=7), str(MEDIA / "frames_cut") + "/", rng
    )
    assert len(frames) == 6  # 6 frames, at most 7 asked: all kept, the cut one decoded as far as it goes
    bad = tmp_path / "clip"
    bad.mkdir()
    for index, source in enumerate(sorted((MEDIA / "frames_cut").iterdir())):
        (bad / f"f_{index}.jpg").write_bytes(source.read_bytes())
    (bad / "f_9.jpg").write_bytes(b"not an image")
    before = rng.get_state()
    with pytest.raises(VideoDecodeError, match="f_9.jpg"):
        read_reference_frames(SAMPLER, str(bad) + "/", rng)
    assert rng.get_state() == before  # the reference fails on it before drawing


@needs_decord
def test_with_decord_the_frames_are_decords_own():
    import decord

    for name in ("hevc.mp4", "mpeg4.avi", "h264_10bit.mp4"):
        path = str(MEDIA / name)
        rng, twin = CompatRandom(11, 11), CompatRandom(11, 11)
        frames = read_reference_frames(SAMPLER, path, rng)
        picks = reference_picks(twin)
        expected = decord.VideoReader(path, num_threads=1).get_batch(picks).asnumpy()
        # decord's frames after a seek are not reproducible from one reader to the next in a
        # process that read other videos (mpeg4.avi: other pixels for the same indices), so
        # the frames are compared by count and size; the choice of indices is `picks`'.
        assert np.stack([np.asarray(f) for f in frames]).shape == expected.shape, name
    ten_bit = str(MEDIA / "h264_10bit.mp4")
    ours = read_reference_frames(SAMPLER, ten_bit, CompatRandom(1, 1))
    twin = CompatRandom(1, 1)
    picks = reference_picks(twin)
    pyav = decode_frames(ten_bit, picks)
    assert any(not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(ours, pyav))  # decord's colours


@needs_decord
@pytest.mark.parametrize("name", ["av1.mp4", "cut.mp4"])
def test_with_decord_a_file_it_cannot_open_is_skipped_before_any_draw(name):
    rng = CompatRandom(7, 7)
    before = rng.get_state()
    with pytest.raises(VideoDecodeError, match="decord cannot open"):
        read_reference_frames(SAMPLER, str(MEDIA / name), rng)
    assert rng.get_state() == before
