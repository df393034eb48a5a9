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
import time

import av
import numpy as np

# The longest a stream's demux may take: a file that streams packets without end (a growing
# or crafted one) is a skip, not a worker held forever. An hour of 4K demuxes in seconds.
DEMUX_BUDGET_S = 300.0


@dataclasses.dataclass(frozen=True, eq=False)
class FrameTable:
    """One video stream's frames, from its packets.

    `frame_pts` holds the presentation timestamps of the frames decoding from the first
    decodable packet shows, ascending, and `count` is their number: packets an edit list
    discards, packets before the first keyframe (a capture that began mid-GOP), that
    keyframe's leading pictures and a truncated last packet are left out; every fragment
    of a fragmented mp4 is in. When some packet carries no timestamp, `frame_pts` is None,
    `count` is the header's count (else the packet count) and frames can only be counted
    off a decode from the start. `seek_pts` are the keyframes a decoder can start from and
    output, for every frame shown at or after the keyframe, the pixels decoding from the
    start gives.
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
    fewer than the packets, no keyframe is trusted and every decode starts from the start.
    """
    timestamps: list[int | None] = []
    keyframe: list[bool] = []
    discard: list[bool] = []
    corrupt: list[bool] = []
    deadline = time.monotonic() + DEMUX_BUDGET_S
    for packet in container.demux(stream):
        if packet.size == 0:  # the demuxer's end-of-stream marker
            continue
        if len(timestamps) % 256 == 0 and time.monotonic() > deadline:
            raise TimeoutError(f"demuxing took over {DEMUX_BUDGET_S} s ({len(timestamps)} packets)")
        timestamps.append(packet.pts)
        keyframe.append(packet.is_keyframe)
        discard.append(packet.is_discard)
        corrupt.append(packet.is_corrupt)
    rate = float(stream.average_rate) if stream.average_rate else 0.0
    rate = rate if rate > 0 else 1.0
    if any(t is None for t in timestamps):
        count = stream.frames if stream.frames > 0 else len(timestamps)
        return FrameTable(count, rate, None, np.zeros(0, np.int64))
    if keyframes is not None:
        # An index longer than the packets read is a file cut short: its first entries are
        # the packets that were there.
        keyframe = keyframes[: len(timestamps)] if len(keyframes) >= len(timestamps) else [False] * len(timestamps)
    pts = np.asarray(timestamps, np.int64)
    shown = shown_mask(pts, np.asarray(keyframe, bool), np.asarray(discard, bool), np.asarray(corrupt, bool))
    # Packets before the first keyframe never decode, whatever they show. A keyframe an edit
    # list hides is still a start: its frame is decoded, then dropped.
    key = np.asarray(keyframe, bool)
    first = int(np.argmax(key)) if key.any() else len(pts)
    seekable = np.zeros(len(pts), bool)
    seekable[first:] = seek_mask(pts[first:], key[first:])
    seek = np.sort(pts[seekable])
    frame_pts = np.sort(pts[shown])
    return FrameTable(len(frame_pts), rate, frame_pts, seek)


def shown_mask(pts: np.ndarray, keyframe: np.ndarray, discard: np.ndarray, corrupt: np.ndarray) -> np.ndarray:
    """Mask of the packets (in decode order) whose frames decoding from the start shows.

    A decoder outputs nothing before the first keyframe (its references are missing), nor
    that keyframe's leading pictures (shown before it, decoded after it: an open GOP's,
    which need the GOP before). An edit list discards packets; a file cut short ends in a
    packet the demuxer flags corrupt, which decodes to nothing. A stream without any
    keyframe flag keeps every packet: nothing tells which ones decode.
    """
    shown = ~discard
    tail = len(corrupt)
    while tail and corrupt[tail - 1]:
        tail -= 1
    shown[tail:] = False
    if keyframe.any():
        first = int(np.argmax(keyframe))
        shown[:first] = False
        shown &= pts >= pts[first]
    return shown


def seek_mask(pts: np.ndarray, keyframe: np.ndarray) -> np.ndarray:
    """Mask of the keyframes (in decode order) a decoder may start from for the frames
    shown at or after them: every packet before one in decode order shows earlier.

    Then decoding from it meets every frame that shows from it on, each with the references
    it has decoding from the start. An open-GOP keyframe (HEVC CRA, an H.264 recovery
    point) qualifies: its leading pictures follow it in decode order but show before it,
    so they are never asked of it (the frame before a keyframe is served by the keyframe
    before), and the decoder drops or mis-decodes them without harm.
    """
    if not len(pts):
        return keyframe
    before = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], pts[:-1]]))
    return keyframe & (before < pts)


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
