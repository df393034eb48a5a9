"""Frame tables from demuxed packets (bagel_data.media.video_probe)."""

from __future__ import annotations

import av
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bagel_data.media.video_probe import FrameTable, TableCache, clean_keyframes, probe_stream
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
def test_edit_list_discards_are_no_frames_but_the_header_count_stays(tmp_path):
    path = make_h264(tmp_path / "trim.mp4", 40, first_pts=-20)  # the muxer trims 5 frames
    table = _table(path)
    assert table.count == 40  # the header's count, as the sampler has always used
    assert table.frame_pts is not None
    assert table.frame_pts.tolist() == _decoded_pts(path)
    assert len(table.frame_pts) == 35


@needs_x264
def test_matroska_counts_packets(tmp_path):
    path = make_h264(tmp_path / "clip.mkv", 50)
    with av.open(path) as container:
        assert container.streams.video[0].frames == 0  # no count in the header
    assert _table(path).count == 50


@needs_x264
@pytest.mark.parametrize("open_gop", [False, True])
def test_seek_points_are_keyframes_with_no_leading_pictures(tmp_path, open_gop):
    path = make_h264(tmp_path / "clip.mkv", 48, gop=12, bframes=2, open_gop=open_gop)
    with av.open(path) as container:
        packets = [p for p in container.demux(video=0) if p.size]
    keyframes = [p.pts for p in packets if p.is_keyframe]
    table = _table(path)
    assert set(table.seek_pts.tolist()) <= set(keyframes)
    assert table.seek_pts[0] == keyframes[0]
    if not open_gop:
        assert table.seek_pts.tolist() == sorted(keyframes)
    else:  # open GOPs: keyframes followed by B-frames that show before them are no seek points
        order = [p.pts for p in packets]
        leading = {k for k in keyframes if min(order[order.index(k) + 1 :], default=k) < k}
        assert leading
        assert set(table.seek_pts.tolist()) == set(keyframes) - leading


def test_clean_keyframes_by_hand():
    # decode order: I0 P3 B1 B2 | I6(open: B4 B5 follow it) P9 B7 B8 | I10 P11
    pts = np.array([0, 3, 1, 2, 6, 4, 5, 9, 7, 8, 10, 11])
    keyframe = np.array([1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0], bool)
    assert np.flatnonzero(clean_keyframes(pts, keyframe)).tolist() == [0, 10]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), size=st.integers(1, 30))
def test_clean_keyframes_split_the_stream(data, size):
    """From a clean keyframe on in decode order come exactly the frames that show from it on."""
    pts = np.array(data.draw(st.permutations(range(size))))
    keyframe = np.array(data.draw(st.lists(st.booleans(), min_size=size, max_size=size)))
    mask = clean_keyframes(pts, keyframe)
    for k in range(size):
        splits = set(pts[k:].tolist()) == {p for p in pts.tolist() if p >= pts[k]}
        assert mask[k] == (keyframe[k] and splits)


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
