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


class _Packet:
    def __init__(self, pts, keyframe=False, size=100, corrupt=False):
        self.pts, self.is_keyframe, self.size = pts, keyframe, size
        self.is_discard, self.is_corrupt = False, corrupt


class _Demuxer:
    """What `probe_stream` reads of a container and its stream: scripted packets."""

    def __init__(self, packets, rate=24, frames=0):
        self.packets, self.average_rate, self.frames = packets, rate, frames

    def demux(self, _stream):
        return iter(self.packets)


def _probe(packets, keyframes=None, **stream) -> FrameTable:
    fake = _Demuxer(packets, **stream)
    return probe_stream(fake, fake, keyframes)


def test_the_end_of_stream_marker_and_trailing_corrupt_packets_are_no_frames():
    packets = [_Packet(0, True), _Packet(1), _Packet(2), _Packet(3, corrupt=True), _Packet(4, corrupt=True)]
    table = _probe([*packets, _Packet(None, size=0)])  # the demuxer's empty marker has no timestamp
    assert table.frame_pts.tolist() == [0, 1, 2] and table.count == 3


def test_a_stream_without_a_rate_or_timestamps_still_gets_a_table():
    assert _probe([_Packet(0, True), _Packet(1)], rate=0).rate == 1.0
    untimed = _probe([_Packet(None, True), _Packet(None), _Packet(None)], frames=0)
    assert untimed.frame_pts is None and untimed.count == 3  # no count in the header: the packets


def test_a_longer_index_gives_the_flags_of_the_packets_there_are():
    packets = [_Packet(0), _Packet(1), _Packet(2), _Packet(3)]  # flags from zeroed payload: none
    table = _probe(packets, keyframes=[True, False, True, False, True, False])  # the file was cut short
    assert table.seek_pts.tolist() == [0, 2] and table.count == 4


def test_a_keyframe_whose_timestamp_an_earlier_packet_shows_is_no_seek_point():
    pts, keyframe = np.array([0, 1, 1, 2]), np.array([1, 0, 1, 0], bool)
    assert np.flatnonzero(seek_mask(pts, keyframe)).tolist() == [0]


def test_the_first_keyframes_leading_pictures_are_not_counted():
    # decode order: I4 B2 B3 (leading: shown before the first keyframe) P5
    table = _probe([_Packet(4, True), _Packet(2), _Packet(3), _Packet(5)])
    assert table.frame_pts.tolist() == [4, 5]
