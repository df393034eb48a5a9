"""Counting a remote video's frames without fetching its frames.

Demuxing reads every packet, and on an object store that is the whole file. Where the
container's index already places every packet (mp4's sample tables, read at open), the
bytes of those packets are known to be payload that demuxing only passes on: a
`HollowFile` hands them out as zeros instead of fetching them, and fetches the rest (box
headers, anything the index does not cover) from the file. Only timestamps and keyframe
flags are taken from such a demux, never pixels: decoding opens the file again, whole.
"""

from __future__ import annotations

import bisect
import io
import time
from typing import BinaryIO

import av

from .video_open import open_video, video_stream
from .video_probe import FrameTable, probe_stream

_EBML = b"\x1a\x45\xdf\xa3"  # the first bytes of every Matroska and WebM file: no per-packet index


def probe_remote(file: BinaryIO, path: str) -> FrameTable:
    """The FrameTable of the video in `file`, fetching its header and index but, where the
    index places every packet, none of the packets."""
    hollow = HollowFile(file, file_size(file))
    hollow.read_ahead()  # the first request fetches the head, whatever the format
    if hollow.read(len(_EBML)) != _EBML:  # not Matroska: mp4's index may spare the payload
        hollow.read_ahead(False)
    hollow.seek(0)
    with open_video(hollow, path) as container:
        video_stream(container, path)
        payload = indexed_payload(container)
        if not payload:
            hollow.read_ahead()
            return probe_stream(container, container.streams.video[0])
        hollow.hollow_out(payload)
        # The demuxer's parser may read keyframe flags from payload, which is zeros here;
        # the index's own flags (mp4's sync samples) are the container's word.
        stream = container.streams.video[0]
        return probe_stream(container, stream, [entry.is_keyframe for entry in stream.index_entries])


def indexed_payload(container: av.container.InputContainer) -> list[tuple[int, int]]:
    """The byte ranges of every indexed packet, merged and sorted; empty unless the index
    of the first video stream lists each of its frames (mp4 does, Matroska's cues do not)."""
    video = container.streams.video[0] if container.streams.video else None
    if video is None or video.frames <= 0 or len(video.index_entries) != video.frames:
        return []
    spans = sorted(
        (entry.pos, entry.pos + entry.size)
        for stream in container.streams
        for entry in stream.index_entries
        if entry.pos >= 0 and entry.size > 0
    )
    merged: list[tuple[int, int]] = []
    for start, stop in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


class HollowFile(io.RawIOBase):
    """A seekable file whose bytes inside `hollow` ranges read as zeros, unfetched.

    Outside them, each read is a request to the file (an object store's ranged GET) until
    `read_ahead()`; from then on it fetches ranges (`RangeSizer`) and serves the reads
    that follow from them, as a demux that reads the whole file needs.
    """

    def __init__(self, file: BinaryIO, size: int):
        super().__init__()
        self._file, self._size, self._position = file, size, 0
        self._sizer: RangeSizer | None = None
        self._windows: list[tuple[int, bytes]] = []  # fetched ranges, the latest last
        self.hollow_out([])

    def read_ahead(self, on: bool = True) -> None:
        """From now on, fetch in ranges sized from the round trip and bandwidth seen (`on`),
        or one request per read outside the ranges already fetched."""
        if not on:
            self._sizer = None
        elif self._sizer is None:
            self._sizer = RangeSizer(self._size)

    def hollow_out(self, hollow: list[tuple[int, int]]) -> None:
        """From now on, read the sorted, disjoint `hollow` ranges as zeros."""
        self._starts = [start for start, _ in hollow]
        self._hollow = hollow

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        start = self._position
        stop = min(start + len(view), self._size)
        at = start
        while at < stop:
            hollow_stop, next_hollow = self._around(at)
            piece_stop = min(stop, hollow_stop if hollow_stop > at else next_hollow)
            if hollow_stop > at:
                view[at - start : piece_stop - start] = bytes(piece_stop - at)
            else:
                data = self._fetch(at, piece_stop - at)
                if not data:
                    break
                view[at - start : at - start + len(data)] = data
                piece_stop = at + len(data)
            at = piece_stop
        self._position = at
        return at - start

    def _fetch(self, at: int, length: int) -> bytes:
        """`length` bytes (fewer at the end) from `at`: from a fetched range that holds them,
        else one request, for a range that holds them when reading ahead."""
        for start, data in reversed(self._windows):
            if start <= at and at + length <= start + len(data):
                return data[at - start : at + length - start]
        wanted = length if self._sizer is None else max(length, self._sizer.size_at(at))
        began = time.perf_counter()
        self._file.seek(at)
        data = self._file.read(wanted)
        if self._sizer is None:
            return data
        self._sizer.seen(len(data), time.perf_counter() - began, at + len(data))
        self._windows = [*self._windows[-(_WINDOWS - 1) :], (at, data)]
        return data[:length]

    def _around(self, at: int) -> tuple[int, int]:
        """(end of the hollow range holding `at`, or `at` when none does; start of the next one)."""
        index = bisect.bisect_right(self._starts, at) - 1
        inside = self._hollow[index][1] if index >= 0 and self._hollow[index][1] > at else at
        following = self._starts[index + 1] if index + 1 < len(self._starts) else self._size
        return inside, following


_WINDOWS = 3  # fetched ranges kept: the one read on, and the header and index a demuxer jumps to
_FIRST = 64 << 10  # the first request: mostly round trip, so it measures that
_PROBE = 1 << 20  # the second: mostly transfer, so it measures the bandwidth
_WHOLE = 4 << 20  # a file this small is read whole at once
_MOST = 32 << 20  # no range above this: the memory a reader holds


class RangeSizer:
    """How much to fetch per request when a whole file will be read: a first small request
    (the head; it times the round trip), then the rest of a file of at most 4 MiB, or 1 MiB
    of a larger one (it times the bandwidth), then ranges that take about 8 round trips to transfer (so waiting is
    about a ninth of the time), 1 to 32 MiB. A jump away from where reading went on (a
    header, the index at the end) gets a small range."""

    def __init__(self, size: int):
        self.size = size
        self.round_trip: float | None = None  # seconds: the quickest request
        self.bandwidth: float | None = None  # bytes per second beyond the round trip
        self._requests = 0
        self._next = 0  # where the last request ended

    def size_at(self, at: int) -> int:
        rest = self.size - at
        if self._requests == 0:
            return min(rest, _FIRST)
        if self.size <= _WHOLE:
            return rest
        if at != self._next and self._requests > 1:
            return min(rest, _FIRST)
        if self._requests == 1 or self.round_trip is None or not self.bandwidth:
            return min(rest, _PROBE)
        wanted = int(min(max(8 * self.round_trip * self.bandwidth, _PROBE), _MOST))
        return rest if rest <= wanted + _PROBE else wanted

    def seen(self, length: int, seconds: float, end: int) -> None:
        """One request's `length` bytes took `seconds`; it ended at byte `end`."""
        self._requests += 1
        self._next = end
        self.round_trip = seconds if self.round_trip is None else min(self.round_trip, seconds)
        if length >= _PROBE // 2:
            transfer = max(seconds - self.round_trip, 1e-6)
            self.bandwidth = max(self.bandwidth or 0.0, length / transfer)


def file_size(file: BinaryIO) -> int:
    position = file.tell()
    size = file.seek(0, io.SEEK_END)
    file.seek(position)
    return size
