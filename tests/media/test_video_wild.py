"""Video as phones, cameras and editors write it: display rotation, captures that begin
mid-GOP, edit lists, fragmented and truncated mp4, open GOPs (x264 recovery points, x265
CRA frames). Each file is a few dozen 64x64 frames; the truth is `decode_all`: what
decoding the file from the start shows."""

from __future__ import annotations

import dataclasses
import shutil

import av
import numpy as np
import pytest

from bagel_data.compat.streams import CompatRandom
from bagel_data.media import video
from bagel_data.media.video_decode import decode_counts
from bagel_data.nemo.video import read_frames_decord
from helpers.videos import decode_all, drop_leading_packets, has_x264, make_h264, make_video, rotate_mp4, truncate

pytestmark = pytest.mark.skipif(not has_x264(), reason="this PyAV wheel has no libx264")
needs_x265 = pytest.mark.skipif("libx265" not in av.codecs_available, reason="this PyAV wheel has no libx265")

OPEN_X264 = "keyint=12:min-keyint=12:scenecut=0:bframes=2:open-gop=1"
OPEN_X265 = "keyint=12:min-keyint=12:scenecut=0:bframes=3:open-gop=1"


def _build(root, name: str) -> str:
    """The file of kind `name` under `root`."""
    kind, suffix = name.rsplit(".", 1)
    path = str(root / name)
    if kind == "mid-gop":  # 5 packets of the first GOP lost: a recording that began at a P-frame
        return drop_leading_packets(make_video(root / f"whole.{suffix}"), path, 5)
    if kind == "open-gop-mid":  # begins at an open-GOP keyframe whose leading pictures are lost
        return drop_leading_packets(make_video(root / f"og.{suffix}", params=OPEN_X264), path, 13)
    if kind == "edit-list":  # `ffmpeg -ss T -c copy`: leading samples hidden by an edit list
        return make_h264(path, 48, first_pts=-20)
    if kind == "fragmented":
        return make_video(path, 72, mux_options={"movflags": "frag_keyframe"})
    if kind == "truncated-faststart":  # an upload cut at 75 %
        return truncate(make_video(path, 48, mux_options={"movflags": "faststart"}), 0.75)
    if kind == "open-gop":
        return make_video(path, 48, params=OPEN_X264)
    if kind == "hevc-cra":
        return make_video(path, 48, codec="libx265", params=OPEN_X265)
    if kind == "hevc-cra-mid":
        return drop_leading_packets(make_video(root / f"cra.{suffix}", codec="libx265", params=OPEN_X265), path, 5)
    raise AssertionError(name)


KINDS = [
    "mid-gop.mp4",
    "mid-gop.mkv",
    "open-gop-mid.mp4",
    "open-gop-mid.mkv",
    "edit-list.mp4",
    "fragmented.mp4",
    "truncated-faststart.mp4",
    "open-gop.mp4",
    "open-gop.mkv",
    pytest.param("hevc-cra.mp4", marks=needs_x265),
    pytest.param("hevc-cra.mkv", marks=needs_x265),
    pytest.param("hevc-cra-mid.mp4", marks=needs_x265),
    pytest.param("hevc-cra-mid.mkv", marks=needs_x265),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("wild")


def _delta(before: dict[str, int]) -> dict[str, int]:
    after = decode_counts()
    return {key: after[key] - before.get(key, 0) for key in after if after[key] != before.get(key, 0)}


@pytest.mark.parametrize("name", KINDS)
def test_count_is_what_decoding_from_the_start_shows(root, name):
    path = _build(root, name)
    shown = decode_all(path)
    video._TABLES.clear()
    before = decode_counts()
    assert video._probe(path)[0] == len(shown)
    assert "frames_decoded" not in _delta(before)  # counted from the packets, not by decoding


@pytest.mark.parametrize("name", KINDS)
def test_every_frame_is_the_frame_decoding_from_the_start_shows(root, name):
    path = _build(root, name)
    shown = decode_all(path)
    video._TABLES.clear()
    count = video._probe(path)[0]
    everything = video.decode_frames(path, list(range(count)))
    assert len(everything) == len(shown)
    for i, (frame, (_, pixels, _)) in enumerate(zip(everything, shown)):
        assert np.array_equal(np.asarray(frame), pixels), f"frame {i} of {name}"
    # The frame for an index does not depend on the other indices asked for.
    last = count - 1
    for request in ([last], [0, last], [1, last // 2, last], [last // 2 + 1, last - 1, last]):
        assert np.array_equal(np.asarray(video.decode_frames(path, request)[-1]), shown[last][1])
        alone = video.decode_frames(path, [request[0]])[0]
        assert np.array_equal(np.asarray(alone), shown[request[0]][1])


@pytest.mark.parametrize("name", [k for k in KINDS if "open-gop" in str(k) or "hevc" in str(k)])
def test_open_gop_keyframes_are_seek_points(root, name):
    """A late frame costs its own GOP, not a decode from the start."""
    path = _build(root, name)
    shown = decode_all(path)
    video._TABLES.clear()
    for target in (len(shown) - 14, len(shown) - 2):  # in the GOP before the last, and in the last
        before = decode_counts()
        frame = video.decode_frames(path, [target])[0]
        assert np.array_equal(np.asarray(frame), shown[target][1])
        spent = _delta(before)
        assert spent.get("seeked") == 1, spent
        assert spent["frames_decoded"] <= 12 + 4, spent  # its GOP (12) and leading pictures, of 36-48


def test_sampler_draws_never_lose_an_edit_list_row(root):
    path = _build(root, "edit-list.mp4")
    shown = decode_all(path)
    sampler = video.FrameSampler(max_num_frames=8, min_num_frames=8)
    for seed in range(20):  # every draw decodes: none lands on a hidden leading sample
        frames = sampler(path, np.random.default_rng(seed))
        assert all(any(np.array_equal(np.asarray(f), s[1]) for s in shown) for f in frames)


@pytest.mark.parametrize("clockwise", [90, 180, 270])
def test_rotated_phone_video_comes_out_upright(tmp_path, clockwise):
    path = rotate_mp4(make_h264(tmp_path / "phone.mp4", 24), clockwise)
    stored = [pixels for _, pixels, _ in decode_all(path)]
    upright = [np.rot90(pixels, -clockwise // 90) for pixels in stored]  # np.rot90 turns counter-clockwise
    sampler = video.FrameSampler(max_num_frames=4, min_num_frames=4, sample="middle")
    frames = sampler(path, np.random.default_rng(0))
    picks = video.frame_indices(4, 24, "middle")
    assert [np.asarray(f).shape for f in frames] == [upright[0].shape] * 4
    if clockwise != 180:
        assert upright[0].shape[:2] == stored[0].shape[::-1][1:]  # portrait out of landscape
    for frame, i in zip(frames, picks):
        assert np.array_equal(np.asarray(frame), upright[i])


def test_rotation_is_applied_in_compat_mode_and_the_nemo_mirror_as_decord_does(tmp_path):
    """decord 0.6 turns frames by the display matrix, so the reference's frames are upright."""
    path = rotate_mp4(make_h264(tmp_path / "phone.mp4", 24), 90)
    upright = [np.rot90(pixels, -1) for _, pixels, _ in decode_all(path)]
    sampler = video.FrameSampler(max_num_frames=4, min_num_frames=4, sample="middle")
    frames = sampler(path, CompatRandom(0, 0))
    assert [np.asarray(f).shape for f in frames] == [upright[0].shape] * 4
    assert np.array_equal(np.asarray(frames[0]), upright[video.frame_indices(4, 24, "middle")[0]])
    mirrored = read_frames_decord(path, 4, "middle", min_num_frames=4, rng=np.random.default_rng(0))
    assert [np.asarray(f).shape for f in mirrored] == [upright[0].shape] * 4
    stored = video.decode_frames(path, [0], upright=False)[0]
    assert np.asarray(stored).shape == upright[0].shape[1::-1] + (3,)


def test_truncated_tail_keeps_the_row(root, tmp_path):
    """Every draw from an upload cut short decodes; none reaches past its last whole frame."""
    path = shutil.copy(_build(root, "truncated-faststart.mp4"), tmp_path / "cut.mp4")
    video._TABLES.clear()
    sampler = video.FrameSampler(max_num_frames=8, min_num_frames=8)
    for seed in range(10):
        assert len(sampler(str(path), np.random.default_rng(seed))) == 8


def test_a_count_decoding_disproves_is_corrected_without_losing_the_row(tmp_path):
    """A table that promises frames the decoder never shows (a packet passed whole by the
    demuxer, refused by the decoder): the sampler draws again from what decodes."""
    path = make_h264(tmp_path / "clip.mkv", 24)
    shown = decode_all(path)
    video._TABLES.clear()
    table = video._frame_table(path)
    ghosts = table.frame_pts[-1] + np.arange(1, 25) * 42  # 24 frames past the end, never shown
    promised = dataclasses.replace(table, count=48, frame_pts=np.concatenate([table.frame_pts, ghosts]))
    video._TABLES.put(video._file_key(path), promised)
    before = decode_counts()
    sampler = video.FrameSampler(max_num_frames=4, min_num_frames=4, sample="middle")
    frames = sampler(path, np.random.default_rng(0))
    assert _delta(before).get("count_corrected") == 1
    picks = video.frame_indices(4, 24, "middle")
    assert [np.array_equal(np.asarray(f), shown[i][1]) for f, i in zip(frames, picks)] == [True] * 4
    assert video._probe(path)[0] == 24  # the corrected count is kept for the next draws
