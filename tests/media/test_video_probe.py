"""Frame tables from demuxed packets (bagel_data.media.video_probe)."""

from __future__ import annotations

import av
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bagel_data.media.video_probe import FrameTable, TableCache, probe_stream, seek_mask, shown_mask
from helpers.videos import has_x264, make_h264

needs_x264 = pytest.mark.skipif(not has_x264(), reason="this PyAV wheel has no libx264")


def _table(path: str) -> FrameTable:
    with av.open(path) as container:
        return probe_stream(container, container.streams.video[0])


def _decoded_pts(path: str) -> list[int]:
    with av.open(path) as container:
        return [frame.pts for frame in container.decode(video=0)]


@needs_x264
@pytest.mark.parametrize("suffix", ["mp4", "mkv"])
def test_frame_pts_are_what_decoding_from_the_start_outputs(tmp_path, suffix):
    path = make_h264(tmp_path / f"clip.{suffix}", 60, frame_steps=[4, 2, 6, 3])
    table = _table(path)
    assert table.count == 60
    assert table.frame_pts is not None
    assert table.frame_pts.tolist() == _decoded_pts(path)
    assert table.rate > 0


@needs_x264
def test_edit_list_discards_are_no_frames_and_not_counted(tmp_path):
    path = make_h264(tmp_path / "trim.mp4", 40, first_pts=-20)  # the muxer trims 5 frames
    with av.open(path) as container:
        assert container.streams.video[0].frames == 40  # the header counts the hidden ones
    table = _table(path)
    assert table.frame_pts is not None
    assert table.frame_pts.tolist() == _decoded_pts(path)
    assert table.count == len(table.frame_pts) == 35


@needs_x264
def test_matroska_counts_packets(tmp_path):
    path = make_h264(tmp_path / "clip.mkv", 50)
    with av.open(path) as container:
        assert container.streams.video[0].frames == 0  # no count in the header
    assert _table(path).count == 50


@needs_x264
@pytest.mark.parametrize("open_gop", [False, True])
def test_seek_points_are_every_keyframe_of_a_clean_stream(tmp_path, open_gop):
    path = make_h264(tmp_path / "clip.mkv", 48, gop=12, bframes=2, open_gop=open_gop)
    with av.open(path) as container:
        packets = [p for p in container.demux(video=0) if p.size]
    keyframes = [p.pts for p in packets if p.is_keyframe]
    table = _table(path)
    assert set(table.seek_pts.tolist()) <= set(keyframes)
    assert table.seek_pts[0] == keyframes[0]
    # Open-GOP keyframes too: they are a start for every frame shown at or after them.
    assert table.seek_pts.tolist() == sorted(keyframes)


def test_seek_mask_by_hand():
    # decode order: I0 P3 B1 B2 | I6(open: B4 B5 follow it) P9 B7 B8 | I10 P11 | I12 that a
    # frame decoded before it shows after (P13): no start for what shows from 12 on
    pts = np.array([0, 3, 1, 2, 6, 4, 5, 9, 7, 8, 10, 13, 12, 11])
    keyframe = np.array([1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0], bool)
    assert np.flatnonzero(seek_mask(pts, keyframe)).tolist() == [0, 4, 10]


def test_shown_mask_by_hand():
    # decode order: P2 B1 (a capture that began mid-GOP) | I6 B4 B5 (leading) P9 B7 B8 | P12 (cut short)
    pts = np.array([2, 1, 6, 4, 5, 9, 7, 8, 12])
    keyframe = np.array([0, 0, 1, 0, 0, 0, 0, 0, 0], bool)
    discard = np.zeros(9, bool)
    corrupt = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1], bool)
    assert pts[shown_mask(pts, keyframe, discard, corrupt)].tolist() == [6, 9, 7, 8]
    discard[7] = True  # an edit list hides 8
    assert pts[shown_mask(pts, keyframe, discard, corrupt)].tolist() == [6, 9, 7]
    # no keyframe flag at all: nothing says which packets decode, so all count
    assert shown_mask(pts, np.zeros(9, bool), np.zeros(9, bool), np.zeros(9, bool)).all()


@settings(max_examples=200, deadline=None)
@given(data=st.data(), size=st.integers(1, 30))
def test_seek_points_start_every_frame_shown_after_them(data, size):
    """From a seek point on in decode order come all the frames that show from it on."""
    pts = np.array(data.draw(st.permutations(range(size))))
    keyframe = np.array(data.draw(st.lists(st.booleans(), min_size=size, max_size=size)))
    mask = seek_mask(pts, keyframe)
    for k in range(size):
        starts = {p for p in pts.tolist() if p >= pts[k]} <= set(pts[k:].tolist())
        assert mask[k] == (keyframe[k] and starts)


def test_seek_point_is_the_last_at_or_before():
    table = FrameTable(10, 1.0, np.arange(10), np.array([2, 5, 8]))
    assert [table.seek_point(p) for p in (1, 2, 4, 5, 7, 8, 99)] == [None, 2, 2, 5, 5, 8, 8]


def test_table_cache_keeps_the_most_recent():
    cache, tables = TableCache(size=2), [FrameTable(i, 1.0, None, np.zeros(0, np.int64)) for i in range(3)]
    for i, table in enumerate(tables):
        cache.put(("f", i), table)
        if i == 1:
            assert cache.get(("f", 0)) is tables[0]  # a hit makes it recent
    assert cache.get(("f", 1)) is None
    assert cache.get(("f", 0)) is tables[0] and cache.get(("f", 2)) is tables[2]
