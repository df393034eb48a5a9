"""Seeking decode of chosen frames (bagel_data.media.video_decode via video.decode_frames):
the same pixels as decoding from the start, at the cost of the frames kept."""

from __future__ import annotations

import dataclasses
import shutil

import av
import numpy as np
import pytest
from PIL import Image

from bagel_data.errors import VideoDecodeError
from bagel_data.media import video
from bagel_data.media.video_decode import decode_at, decode_counts, decode_from_start
from bagel_data.media.video_probe import FrameTable, probe_stream
from helpers.videos import has_x264, make_h264, truncate

pytestmark = pytest.mark.skipif(not has_x264(), reason="this PyAV wheel has no libx264")

STREAMS = {
    "b-frames.mp4": {},
    "b-frames.mkv": {},
    "open-gop.mp4": {"open_gop": True},
    "open-gop.mkv": {"open_gop": True},
    "vfr.mp4": {"frame_steps": [4, 4, 2, 6, 3, 5, 8]},
    "vfr.mkv": {"frame_steps": [4, 4, 2, 6, 3, 5, 8]},
    "late-start.mp4": {"first_pts": 400},
    "late-start.mkv": {"first_pts": 400},
    "edit-list.mp4": {"first_pts": -20},
}


@pytest.fixture(scope="module")
def streams(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("streams")
    paths = {name: make_h264(root / name, 72, **kwargs) for name, kwargs in STREAMS.items()}
    damaged = shutil.copy(paths["b-frames.mkv"], root / "damaged-tail.mkv")
    paths["damaged-tail.mkv"] = truncate(str(damaged), 0.8)
    return paths


def _from_start(path: str) -> list[np.ndarray]:
    with av.open(path) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def _delta(before: dict[str, int]) -> dict[str, int]:
    after = decode_counts()
    return {key: after[key] - before.get(key, 0) for key in after if after[key] != before.get(key, 0)}


@pytest.mark.parametrize("name", [*STREAMS, "damaged-tail.mkv"])
def test_same_pixels_as_decoding_from_the_start(streams, name):
    path, expected = streams[name], _from_start(streams[name])
    last = len(expected) - 1
    # Out of order, repeated, both sides of keyframes (GOP 12), first and last frames.
    indices = [last, 0, 11, 12, 13, 35, 36, 5, 5, 47, last - 1]
    before = decode_counts()
    frames = video.decode_frames(path, indices)
    assert [np.asarray(f).shape for f in frames] == [expected[0].shape] * len(indices)
    for frame, i in zip(frames, indices):
        assert np.array_equal(np.asarray(frame), expected[i]), f"frame {i} of {name}"
    assert _delta(before).get("seeked") == 1  # served by seeking (open GOPs too), not from the start


def test_far_frames_cost_their_gops_not_the_stream(tmp_path):
    path = make_h264(tmp_path / "long.mkv", 240, gop=12, bframes=0)
    before = decode_counts()
    frames = video.decode_frames(path, [30, 100, 170, 230])
    assert len(frames) == 4
    decoded = _delta(before)["frames_decoded"]
    assert decoded <= 4 * 12  # at most a GOP for each, where decoding on would take 231


def test_near_frames_decode_on_without_a_seek(tmp_path):
    path = make_h264(tmp_path / "clip.mkv", 48, gop=12, bframes=0)
    before = decode_counts()
    video.decode_frames(path, [13, 14, 16])  # all in the GOP of keyframe 12
    assert _delta(before)["seeks"] == 1
    assert _delta(before)["frames_decoded"] <= 12


def test_untrusted_seeks_fall_back_to_decoding_from_the_start_and_are_counted(tmp_path):
    path = make_h264(tmp_path / "clip.mkv", 48, gop=12, bframes=2)
    expected = _from_start(path)
    with av.open(path) as container:
        table = probe_stream(container, container.streams.video[0])
    no_keyframes = dataclasses.replace(table, seek_pts=table.seek_pts[:0])
    before = decode_counts()
    with av.open(path) as container:
        frames = decode_at(lambda: av.open(path), container, path, no_keyframes, [3, 30])
    assert [np.array_equal(np.asarray(f), expected[i]) for f, i in zip(frames, [3, 30])] == [True, True]
    assert any("no safe keyframe" in key for key in _delta(before)), _delta(before)


def test_a_table_whose_timestamps_never_decode_is_an_error_not_other_frames(tmp_path):
    path = make_h264(tmp_path / "clip.mkv", 48, gop=12, bframes=2)
    with av.open(path) as container:
        table = probe_stream(container, container.streams.video[0])
    stale = dataclasses.replace(table, frame_pts=table.frame_pts + 1)  # a stale table: no frame shows these
    before = decode_counts()
    with av.open(path) as container, pytest.raises(VideoDecodeError, match="promised frame 3 but"):
        decode_at(lambda: av.open(path), container, path, stale, [3, 30])
    assert any("skipped a wanted frame" in key for key in _delta(before)), _delta(before)


def test_frame_past_what_decodes_raises(streams):
    path = streams["edit-list.mp4"]  # the header counts 72 frames, 67 show
    with pytest.raises(VideoDecodeError, match="frame 71 is past the stream's 67 frames"):
        video.decode_frames(path, [0, 71])


def test_sampler_reads_long_matroska_without_decoding_it_to_count(tmp_path):
    path = make_h264(tmp_path / "long.mkv", 240, gop=24, bframes=0)
    video._TABLES.clear()
    before = decode_counts()
    frames = video.FrameSampler(max_num_frames=4, min_num_frames=4, sample="middle")(path)
    expected = _from_start(path)
    assert [np.array_equal(np.asarray(f), expected[i]) for f, i in zip(frames, [29, 89, 149, 209])] == [True] * 4
    assert _delta(before)["frames_decoded"] <= 4 * 24


# A scripted decoder, for what a real encoder will not make on demand: frames come as the
# packets of the list the last seek chose give them, each an image of one grey level (its
# tag), so a test sees which decode of a frame it got.
class _Frame:
    def __init__(self, pts: int, tag: int):
        self.pts, self.tag, self.rotation = pts, tag, 0

    def to_image(self) -> Image.Image:
        return Image.new("L", (1, 1), self.tag)


class _Packet:
    def __init__(self, pts: int, keyframe: bool, frames: list[_Frame]):
        self.pts, self.is_keyframe, self.size, self._frames = pts, keyframe, 1, frames

    def decode(self) -> list[_Frame]:
        return self._frames


class _Container:
    def __init__(self, top: list[_Packet], after_seek: dict[int, list[_Packet]] | None = None):
        self.streams = type("Streams", (), {"video": [type("Stream", (), {"thread_count": 0})()]})()
        self._top, self._after, self._packets = top, after_seek or {}, top

    def seek(self, pts: int, **_) -> None:
        self._packets = self._after[pts]

    def demux(self, _stream):
        yield from self._packets

    def __enter__(self):
        return self

    def __exit__(self, *_):
        return None


def _tags(images) -> list[int]:
    return [image.getpixel((0, 0)) for image in images]


def _open_gop() -> tuple[_Container, FrameTable]:
    """Shown 0, 10, ..., 50; the keyframe at 40 opens its GOP: its leading picture 30 follows
    it in decode order and, decoded after a seek to 40, is garbage (tag 99)."""
    good = {pts: _Frame(pts, pts // 10) for pts in range(0, 60, 10)}
    top = [
        _Packet(0, True, [good[0]]),
        _Packet(10, False, [good[10]]),
        _Packet(20, False, [good[20]]),
        _Packet(40, True, []),
        _Packet(30, False, [good[30], good[40]]),
        _Packet(50, False, [good[50]]),
    ]
    seeked = [_Packet(40, True, []), _Packet(30, False, [_Frame(30, 99), good[40]]), _Packet(50, False, [good[50]])]
    table = FrameTable(6, 1.0, np.arange(0, 60, 10, dtype=np.int64), np.asarray([0, 40], np.int64))
    return _Container(top, {40: seeked}), table


def test_a_leading_picture_decoded_after_a_seek_never_replaces_the_frame_decoded_before():
    container, table = _open_gop()
    frames = decode_at(lambda: _open_gop()[0], container, "clip.mp4", table, [3, 4])
    assert _tags(frames) == [3, 4]


def test_decoding_stops_at_the_wanted_frame():
    container, table = _open_gop()
    before = decode_counts()
    assert _tags(decode_at(lambda: _open_gop()[0], container, "clip.mp4", table, [1])) == [1]
    assert _delta(before)["frames_decoded"] == 2  # frames 0 and 1, not 2


def test_the_frame_one_past_the_table_is_named_not_an_index_error():
    container, table = _open_gop()
    with pytest.raises(VideoDecodeError, match="frame 6 is past the stream's 6 frames"):
        decode_at(lambda: _open_gop()[0], container, "clip.mp4", table, [0, 6])


def test_a_repeated_timestamp_keeps_the_first_frame_that_showed_it():
    frames = [_Frame(0, 0), _Frame(10, 1), _Frame(10, 99), _Frame(20, 2)]
    container = _Container([_Packet(f.pts, i == 0, [f]) for i, f in enumerate(frames)])
    found = decode_from_start(container, "clip.mp4", {1, 2}, np.asarray([0, 10, 20], np.int64))
    assert {index: image.getpixel((0, 0)) for index, image in found.items()} == {1: 1, 2: 2}
