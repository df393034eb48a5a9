"""Remote videos counted without fetching their frames (bagel_data.media.video_remote)."""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bagel_data.media import video, video_remote
from bagel_data.media.video_probe import probe_stream
from bagel_data.media.video_remote import HollowFile, indexed_payload, probe_remote
from helpers.videos import has_x264, make_h264

needs_x264 = pytest.mark.skipif(not has_x264(), reason="this PyAV wheel has no libx264")


class CountingFile(io.BytesIO):
    """Bytes in memory that count what is read from them, as an object store bills it."""

    fetched = 0

    def read(self, size=-1):
        data = super().read(size)
        self.fetched += len(data)
        return data


def _spans(draw_list: list[int], size: int) -> list[tuple[int, int]]:
    edges = sorted({min(edge, size) for edge in draw_list})
    return [(a, b) for a, b in zip(edges[::2], edges[1::2]) if a < b]


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=300),
    edges=st.lists(st.integers(0, 300), max_size=8),
    reads=st.lists(st.tuples(st.integers(0, 320), st.integers(0, 120)), min_size=1, max_size=6),
)
def test_hollow_reads_zeros_inside_and_the_file_outside(data, edges, reads):
    hollow_spans = _spans(edges, len(data))
    expected = bytearray(data)
    for start, stop in hollow_spans:
        expected[start:stop] = bytes(stop - start)
    source = CountingFile(data)
    hollow = HollowFile(source, len(data))
    hollow.hollow_out(hollow_spans)
    for offset, size in reads:
        hollow.seek(offset)
        got = hollow.read(size)
        assert got == bytes(expected[offset : offset + size])
        assert hollow.tell() == offset + len(got)
    hollow.seek(0)
    source.fetched = 0
    assert hollow.read() == bytes(expected)
    assert source.fetched == len(data) - sum(stop - start for start, stop in hollow_spans)


@needs_x264
def test_mp4_table_matches_a_full_demux_without_fetching_the_frames(tmp_path):
    path = make_h264(tmp_path / "clip.mp4", 720, gop=12, bframes=2, frame_steps=[4, 3, 5])
    raw = Path(path).read_bytes()
    source, whole = CountingFile(raw), CountingFile(raw)
    table = probe_remote(source, path)
    with av.open(whole) as container:
        full = probe_stream(container, container.streams.video[0])
        payload = sum(stop - start for start, stop in indexed_payload(container))
    assert table.count == full.count == 720
    assert table.frame_pts.tolist() == full.frame_pts.tolist()
    assert table.seek_pts.tolist() == full.seek_pts.tolist()
    assert payload > 0.9 * len(raw) and whole.fetched >= len(raw)
    # Opening reads the header, the index and the first frames (stream info); no more.
    assert source.fetched < 0.4 * len(raw), (source.fetched, len(raw))


@needs_x264
def test_matroska_has_no_complete_index_and_is_demuxed_whole(tmp_path):
    path = make_h264(tmp_path / "clip.mkv", 48, gop=12)
    with av.open(path) as container:
        assert indexed_payload(container) == []
    source = CountingFile(Path(path).read_bytes())
    table = probe_remote(source, path)
    assert table.count == 48 and len(table.seek_pts) == 4


@needs_x264
@pytest.mark.parametrize("suffix", ["mp4", "mkv"])
def test_sampler_on_an_object_store_gives_the_local_frames(tmp_path, suffix):
    import fsspec

    path = make_h264(tmp_path / f"clip.{suffix}", 96, gop=12, bframes=2)
    memory = fsspec.filesystem("memory")
    memory.pipe(f"/video-remote/clip.{suffix}", Path(path).read_bytes())
    sampler = video.FrameSampler(max_num_frames=6, min_num_frames=3)
    try:
        remote = sampler(f"memory://video-remote/clip.{suffix}", np.random.default_rng(4))
    finally:
        memory.rm(f"/video-remote/clip.{suffix}")
    local = sampler(path, np.random.default_rng(4))
    assert len(remote) == len(local)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(remote, local))


class RequestCountingFile(CountingFile):
    """CountingFile that also counts its reads: each one a ranged GET on an object store."""

    requests = 0

    def read(self, size=-1):
        self.requests += 1
        return super().read(size)


@needs_x264
@pytest.mark.parametrize("whole_below", [4 << 20, 0])
def test_remote_matroska_first_read_takes_a_handful_of_requests(tmp_path, monkeypatch, whole_below):
    """Small files are fetched whole, larger ones in sized ranges: never 32 KiB at a time."""
    monkeypatch.setattr(video_remote, "_WHOLE", whole_below, raising=False)  # 0: take the ranged way
    path = make_h264(tmp_path / "clip.mkv", 1200, gop=24, bframes=2)
    raw = Path(path).read_bytes()
    assert len(raw) > 12 * (32 << 10)  # PyAV's 32 KiB reads would take more than 12 requests
    source = RequestCountingFile(raw)
    table = probe_remote(source, path)
    with av.open(path) as container:
        local = probe_stream(container, container.streams.video[0])
    assert table.frame_pts.tolist() == local.frame_pts.tolist() and table.count == local.count == 1200
    assert source.requests <= 6, source.requests
    assert source.fetched <= len(raw) + (2 << 20)  # a jump re-fetches at most a small range


def test_ranges_are_sized_from_the_round_trip_and_bandwidth():
    sizer = video_remote.RangeSizer(1 << 30)
    assert sizer.size_at(0) == 64 << 10  # the head: it times the round trip
    sizer.seen(64 << 10, 0.0200, 64 << 10)
    assert sizer.size_at(64 << 10) == 1 << 20  # then 1 MiB: it times the bandwidth
    sizer.seen(1 << 20, 0.0300, (64 << 10) + (1 << 20))  # 1 MiB in 10 ms beyond the round trip
    ranged = sizer.size_at((64 << 10) + (1 << 20))
    assert ranged == int(8 * 0.02 * (1 << 20) / 0.01)  # 8 round trips of transfer: about 16.8 MB
    assert sizer.size_at(900 << 20) == 64 << 10  # a jump (the index at the end): a small range
    slow = video_remote.RangeSizer(1 << 30)
    slow.seen(64 << 10, 0.2, 64 << 10)
    slow.seen(1 << 20, 10.2, (64 << 10) + (1 << 20))  # 100 KiB/s: ranges stay at 1 MiB
    assert slow.size_at((64 << 10) + (1 << 20)) == 1 << 20
    fast = video_remote.RangeSizer(1 << 30)
    fast.seen(64 << 10, 0.05, 64 << 10)
    fast.seen(1 << 20, 0.0501, (64 << 10) + (1 << 20))
    assert fast.size_at((64 << 10) + (1 << 20)) == 32 << 20  # capped: memory a reader holds
    small = video_remote.RangeSizer(3 << 20)
    small.seen(64 << 10, 0.02, 64 << 10)
    assert small.size_at(64 << 10) == (3 << 20) - (64 << 10)  # a small file: the rest, whole
    end = video_remote.RangeSizer(18 << 20)
    end.seen(64 << 10, 0.02, 64 << 10)
    end.seen(1 << 20, 0.03, (64 << 10) + (1 << 20))
    assert end.size_at((64 << 10) + (1 << 20)) == (18 << 20) - (64 << 10) - (1 << 20)  # no sliver left


class _Entry:
    def __init__(self, pos: int, size: int, is_keyframe: bool = False):
        self.pos, self.size, self.is_keyframe = pos, size, is_keyframe


class _Stream:
    def __init__(self, frames: int, entries: list[_Entry]):
        self.frames, self.index_entries = frames, entries


class _Streams(list):
    @property
    def video(self) -> list[_Stream]:
        return self[:1]


def test_indexed_payload_merges_spans_and_leaves_out_what_the_index_does_not_place():
    video_stream = _Stream(4, [_Entry(100, 50), _Entry(110, 10), _Entry(-1, 30), _Entry(200, 20)])
    audio = _Stream(0, [_Entry(150, 10), _Entry(400, 0)])
    # A span inside the one before keeps it whole; one of unknown position (-1) or no size
    # is no payload; adjacent spans of two streams are one.
    assert indexed_payload(type("C", (), {"streams": _Streams([video_stream, audio])})()) == [(100, 160), (200, 220)]
    partial = _Stream(5, video_stream.index_entries)  # 5 frames, 4 entries: Matroska's cues
    assert indexed_payload(type("C", (), {"streams": _Streams([partial])})()) == []


@needs_x264
def test_an_mp4_tables_keyframes_are_its_indexs_not_the_zeroed_payloads(tmp_path, monkeypatch):
    path = make_h264(tmp_path / "clip.mp4", 48, gop=12)
    given = []

    def probe(container, stream, keyframes=None):
        given.append(keyframes)
        return probe_stream(container, stream, keyframes)

    monkeypatch.setattr(video_remote, "probe_stream", probe)
    table = probe_remote(CountingFile(Path(path).read_bytes()), path)
    assert given[0] is not None and sum(given[0]) == 4 and len(table.seek_pts) == 4


def test_fetched_ranges_serve_reads_to_their_last_byte_and_a_jump_back():
    data = bytes(range(256)) * 8192  # 2 MiB: fetched in ranges, not whole
    source = RequestCountingFile(data)
    hollow = HollowFile(source, len(data))
    hollow.read_ahead()
    assert hollow.read(10) == data[:10]  # the first request: the head's 64 KiB
    hollow.seek((64 << 10) - 10)
    assert hollow.read(10) == data[(64 << 10) - 10 : 64 << 10]  # its last bytes: no request
    assert source.requests == 1
    hollow.seek(len(data) - 100)  # the index at the end: another range
    assert hollow.read(100) == data[-100:]
    hollow.seek(100)  # back to the header: still held
    assert hollow.read(100) == data[100:200]
    assert source.requests == 2


@needs_x264
def test_an_mp4_whose_index_spares_nothing_is_demuxed_in_ranges(tmp_path, monkeypatch):
    path = make_h264(tmp_path / "clip.mp4", 1200, gop=24, bframes=2)
    raw = Path(path).read_bytes()
    assert len(raw) > 12 * (32 << 10)
    monkeypatch.setattr(video_remote, "indexed_payload", lambda container: [])  # a fragmented mp4's partial index
    source = RequestCountingFile(raw)
    assert probe_remote(source, path).count == 1200
    assert source.requests <= 8, source.requests  # ranges, not one request per 32 KiB read
