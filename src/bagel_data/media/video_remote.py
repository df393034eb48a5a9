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
from typing import BinaryIO

import av

from ..errors import VideoDecodeError
from .video_probe import FrameTable, probe_stream


def probe_remote(file: BinaryIO, path: str) -> FrameTable:
    """The FrameTable of the video in `file`, fetching its header and index but, where the
    index places every packet, none of the packets."""
    hollow = HollowFile(file, file_size(file))
    with av.open(hollow, mode="r") as container:
        if not container.streams.video:
            raise VideoDecodeError(path, "no video stream")
        payload = indexed_payload(container)
        if not payload:
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
    """A seekable file whose bytes inside `hollow` ranges read as zeros, unfetched."""

    def __init__(self, file: BinaryIO, size: int):
        super().__init__()
        self._file, self._size, self._position = file, size, 0
        self.hollow_out([])

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
                self._file.seek(at)
                data = self._file.read(piece_stop - at)
                if not data:
                    break
                view[at - start : at - start + len(data)] = data
                piece_stop = at + len(data)
            at = piece_stop
        self._position = at
        return at - start

    def _around(self, at: int) -> tuple[int, int]:
        """(end of the hollow range holding `at`, or `at` when none does; start of the next one)."""
        index = bisect.bisect_right(self._starts, at) - 1
        inside = self._hollow[index][1] if index >= 0 and self._hollow[index][1] > at else at
        following = self._starts[index + 1] if index + 1 < len(self._starts) else self._size
        return inside, following


def file_size(file: BinaryIO) -> int:
    position = file.tell()
    size = file.seek(0, io.SEEK_END)
    file.seek(position)
    return size
