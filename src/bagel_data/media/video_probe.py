"""What a video stream holds, learnt by demuxing its packets and never decoding them.

Demuxing reads each packet's timestamps and keyframe flag, which is all frame selection
and seeking need: the frame count, each frame's presentation timestamp (frame i is the
frame with the i-th smallest one, as decoding from the start outputs them) and the
keyframes that are safe to seek to.
"""

from __future__ import annotations

import collections
import dataclasses
import threading

import av
import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class FrameTable:
    """One video stream's frames, from its packets.

    `count` is the header's frame count where the container has one (mp4), else the number
    of packets. `frame_pts` holds the presentation timestamps of the frames decoding
    outputs (packets an edit list discards are left out), ascending; None when some packet
    carries no timestamp, and then frames can only be counted off a decode from the start.
    `seek_pts` are the keyframes a decoder can start from and output the same pixels as
    from the start of the stream.
    """

    count: int
    rate: float
    frame_pts: np.ndarray | None
    seek_pts: np.ndarray

    def seek_point(self, pts: int) -> int | None:
        """The last safe keyframe at or before `pts`; None when there is none."""
        at = int(np.searchsorted(self.seek_pts, pts, side="right"))
        return int(self.seek_pts[at - 1]) if at else None


def probe_stream(
    container: av.container.InputContainer, stream: av.VideoStream, keyframes: list[bool] | None = None
) -> FrameTable:
    """Demux every packet of `stream` (reading, not decoding) into its FrameTable.

    `keyframes`, one flag per packet in decode order, replaces the packets' own flags (a
    parser may set them from payload bytes that were not fetched); when its length is not
    the packet count, no keyframe is trusted and every decode starts from the start.
    """
    timestamps: list[int | None] = []
    keyframe: list[bool] = []
    discard: list[bool] = []
    for packet in container.demux(stream):
        if packet.size == 0:  # the demuxer's end-of-stream marker
            continue
        timestamps.append(packet.pts)
        keyframe.append(packet.is_keyframe)
        discard.append(packet.is_discard)
    rate = float(stream.average_rate) if stream.average_rate else 0.0
    count = stream.frames if stream.frames > 0 else len(timestamps)
    if any(t is None for t in timestamps):
        return FrameTable(count, rate if rate > 0 else 1.0, None, np.zeros(0, np.int64))
    if keyframes is not None:
        keyframe = keyframes if len(keyframes) == len(timestamps) else [False] * len(timestamps)
    pts = np.asarray(timestamps, np.int64)
    shown = np.sort(pts[~np.asarray(discard, bool)])
    seek = np.sort(pts[clean_keyframes(pts, np.asarray(keyframe, bool))])
    return FrameTable(count, rate if rate > 0 else 1.0, shown, seek)


def clean_keyframes(pts: np.ndarray, keyframe: np.ndarray) -> np.ndarray:
    """Mask of the keyframes (in decode order) that split the stream cleanly: every packet
    before one shows earlier and every packet after it shows no earlier.

    From such a keyframe on, decoding meets exactly the frames that show from it on. A
    keyframe of an open GOP fails this (its leading pictures show before it but need the
    previous GOP), and so it is never a seek point.
    """
    if not len(pts):
        return keyframe
    before = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], pts[:-1]]))
    after = np.minimum.accumulate(np.concatenate([pts[1:], [np.iinfo(np.int64).max]])[::-1])[::-1]
    return keyframe & (before < pts) & (after >= pts)


class TableCache:
    """The last few FrameTables, keyed by the file's identity (path, size, mtime), so the
    sampler's probe and the decode that follows demux a file once. Thread-safe."""

    def __init__(self, size: int = 16):
        self._tables: collections.OrderedDict[tuple, FrameTable] = collections.OrderedDict()
        self._size, self._lock = size, threading.Lock()

    def get(self, key: tuple) -> FrameTable | None:
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
            return table

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()

    def put(self, key: tuple, table: FrameTable) -> None:
        with self._lock:
            self._tables[key] = table
            self._tables.move_to_end(key)
            while len(self._tables) > self._size:
                self._tables.popitem(last=False)
