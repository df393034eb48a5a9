"""`bagel-data bench video [--quick] [--out FILE]`: what one video sample costs.

For a short and a long video, in mp4 and in Matroska (640x360, 30 fps, a keyframe every
2 s, H.264 where this PyAV has libx264), and a 20 s and a 3-minute mp4 in open GOPs as
encoders write them by default (x265: CRA frames every 250 frames; x264 with open-gop=1,
where this PyAV has them), it measures the CPU seconds (process time, all
threads) of `FrameSampler(max_num_frames=8, min_num_frames=8, sample="middle")`, with the
sampler's table cache emptied before each round so every round demuxes the file as a first
read does; the same frames through decord, the reference's reader, when it is installed
(it is not a dependency); and the bytes and round trips the long mp4 and Matroska cost when
read as an object store serves them (`--delay` seconds per read, 20 ms by default), by the
first reader on a node and by the others, which find the frame table in the node's cache.
Figures are medians of `--rounds` rounds; they are printed and written as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import av
import numpy as np

from bagel_data.media import video
from bagel_data.media.video_decode import decode_counts, decode_from_start
from bagel_data.sources import storage

from .slow_reads import DelayedFile, Tally

WIDTH, HEIGHT, RATE, GOP = 640, 360, 30, 60
FULL_SECONDS, QUICK_SECONDS = (20, 240), (5, 60)
OPEN_GOP_SECONDS, QUICK_OPEN_GOP_SECONDS = (20, 180), (5, 60)
# Open GOPs with each encoder's default keyframe distance (250 frames) and no scene cuts in
# the test picture: keyframes every 8.3 s, each with leading pictures.
OPEN_GOPS = {
    "hevc": ("libx265", "x265-params", "open-gop=1:log-level=error", "ultrafast"),
    "h264-open": ("libx264", "x264-params", "open-gop=1", "veryfast"),
}
SAMPLER = video.FrameSampler(max_num_frames=8, min_num_frames=8, sample="middle")
_SCHEME = "benchstore://"


def _codec() -> str:
    return "libx264" if "libx264" in av.codecs_available else "mpeg4"


def encode(path: Path, seconds: int, open_gop: str | None = None) -> None:
    """A moving test picture, so that frames differ and P/B-frames carry real work;
    `open_gop`: a key of OPEN_GOPS."""
    rows, cols = np.mgrid[0:HEIGHT, 0:WIDTH]
    base = ((cols + rows) % 256).astype(np.uint8)
    with av.open(str(path), "w") as container:
        codec = OPEN_GOPS[open_gop][0] if open_gop else _codec()
        stream = container.add_stream(codec, rate=RATE)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        if open_gop:
            _, key, params, preset = OPEN_GOPS[open_gop]
            stream.options = {"preset": preset, key: params}
        elif _codec() == "libx264":
            stream.options = {"preset": "veryfast", "x264-params": f"keyint={GOP}:min-keyint={GOP}:scenecut=0"}
        else:
            stream.codec_context.gop_size = GOP
        for i in range(seconds * RATE):
            pixels = np.stack([np.roll(base, 3 * i, 1), np.roll(base, i, 0), np.full_like(base, i % 256)], -1)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def remux(source: Path, target: Path) -> None:
    """The same packets in another container (Matroska carries no frame count)."""
    with av.open(str(source)) as reader, av.open(str(target), "w") as writer:
        inner = reader.streams.video[0]
        outer = writer.add_stream_from_template(inner)
        for packet in reader.demux(inner):
            if packet.dts is not None:
                packet.stream = outer
                writer.mux(packet)


def make_videos(folder: Path, durations: tuple[int, ...]) -> dict[str, Path]:
    """`<seconds>s.mp4` and `<seconds>s.mkv` for each duration, kept when already there."""
    videos = {}
    for seconds in durations:
        mp4, mkv = folder / f"{seconds}s.mp4", folder / f"{seconds}s.mkv"
        if not mp4.exists():
            encode(mp4, seconds)
        if not mkv.exists():
            remux(mp4, mkv)
        videos[mp4.name], videos[mkv.name] = mp4, mkv
    return videos


def make_open_gop_videos(folder: Path, durations: tuple[int, ...]) -> dict[str, Path]:
    """`<seconds>s-<kind>.mp4` for each open-GOP kind this PyAV can encode."""
    videos = {}
    for kind, (codec, *_) in OPEN_GOPS.items():
        if codec not in av.codecs_available:
            continue
        for seconds in durations:
            path = folder / f"{seconds}s-{kind}.mp4"
            if not path.exists():
                encode(path, seconds, kind)
            videos[path.name] = path
    return videos


def cpu_seconds(read: Callable[[], object], rounds: int) -> list[float]:
    spent = []
    for _ in range(rounds):
        start = time.process_time()
        read()
        spent.append(time.process_time() - start)
    return spent


def ours(path: Path) -> Callable[[], object]:
    def read() -> object:
        video._TABLES.clear()  # each round demuxes the file, as its first read does
        return SAMPLER(str(path), np.random.default_rng(0))

    return read


def from_start(path: Path) -> Callable[[], object]:
    """The sampler before seeking (the baseline): count by the header or by decoding the
    whole stream, then decode from the start up to the last frame kept."""

    def read() -> object:
        with av.open(str(path)) as container:
            count = container.streams.video[0].frames or sum(1 for _ in container.decode(video=0))
        with av.open(str(path)) as container:
            return decode_from_start(container, str(path), set(video.frame_indices(8, count, "middle")))

    return read


def decord_reader(path: Path) -> Callable[[], object] | None:
    """The reference's read: decord's VideoReader on one thread, the same frame indices."""
    try:
        import decord
    except ImportError:
        return None
    from PIL import Image

    def read() -> object:
        reader = decord.VideoReader(str(path), num_threads=1)
        indices = video.frame_indices(8, len(reader), "middle")
        return [Image.fromarray(frame) for frame in reader.get_batch(indices).asnumpy()]

    return read


@contextlib.contextmanager
def object_store(delay: float, tally: Tally) -> Iterator[None]:
    """`benchstore://<local path>` opens as a `DelayedFile` (each open and read one round
    trip, counted in `tally`) while the block runs."""
    original = storage.open_input

    def open_input(path: str):
        if path.startswith(_SCHEME):
            time.sleep(delay)  # the request that finds the object and its size
            tally.add("opens")
            return io.BufferedReader(DelayedFile(path[len(_SCHEME) :], delay, tally=tally), 64 << 10)
        return original(path)

    storage.open_input = open_input
    try:
        yield
    finally:
        storage.open_input = original


def remote_read(path: Path, delay: float) -> dict:
    """Bytes, round trips and seconds of one sample read from the object store: `cold`, as
    the first reader on a node (it demuxes the file for its frame table), then `warm`, as
    any other process of the node (its table read from the node's cache, video_tables)."""
    from bagel_data.sources.node_cache import ENV

    results = {}
    with tempfile.TemporaryDirectory() as node_cache, _environment(ENV, node_cache):
        for reader in ("cold", "warm"):
            tally = Tally()
            video._TABLES.clear()  # a process of its own: nothing in its memory
            start, cpu = time.perf_counter(), time.process_time()
            with object_store(delay, tally):
                SAMPLER(_SCHEME + str(path), np.random.default_rng(0))
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            results[reader] = {**tally.counts(), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}
    return {**results, "file_bytes": path.stat().st_size}


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def measure_open_gops(videos: dict[str, Path], rounds: int) -> dict:
    """Ours and decord's CPU seconds on the open-GOP videos, and the long over the short."""
    results: dict = {"videos": {}}
    for name, path in videos.items():
        before = decode_counts()
        row: dict = {"ours_cpu_s": _median(cpu_seconds(ours(path), rounds))}
        after = decode_counts()
        row["frames_decoded_per_sample"] = (after["frames_decoded"] - before.get("frames_decoded", 0)) // rounds
        row["from_start_per_sample"] = {
            key: (after[key] - before.get(key, 0)) // rounds for key in after if key.startswith("from_start:")
        }
        reference = decord_reader(path)
        if reference is not None:
            row["decord_cpu_s"] = _median(cpu_seconds(reference, rounds))
            row["ours_over_decord"] = round(row["ours_cpu_s"] / row["decord_cpu_s"], 3)
        results["videos"][name] = row
    for kind in OPEN_GOPS:
        names = sorted((n for n in videos if n.endswith(f"-{kind}.mp4")), key=lambda n: int(n.split("s-")[0]))
        if len(names) > 1:
            short, long = results["videos"][names[0]], results["videos"][names[-1]]
            results[f"long_over_short_{kind}"] = round(long["ours_cpu_s"] / short["ours_cpu_s"], 3)
    return results


def measure(videos: dict[str, Path], rounds: int, delay: float, long_seconds: int) -> dict:
    results: dict = {"codec": _codec(), "size": f"{WIDTH}x{HEIGHT}", "fps": RATE, "gop": GOP, "videos": {}}
    for name, path in videos.items():
        row = {"ours_cpu_s": _median(cpu_seconds(ours(path), rounds))}
        row["from_start_cpu_s"] = _median(cpu_seconds(from_start(path), rounds))
        row["ours_over_from_start"] = round(row["ours_cpu_s"] / row["from_start_cpu_s"], 3)
        reference = decord_reader(path)
        if reference is not None:
            row["decord_cpu_s"] = _median(cpu_seconds(reference, rounds))
            row["ours_over_decord"] = round(row["ours_cpu_s"] / row["decord_cpu_s"], 3)
        results["videos"][name] = row
    for suffix in ("mp4", "mkv"):
        names = sorted((name for name in videos if name.endswith(suffix)), key=lambda name: int(name.split("s.")[0]))
        short, long = results["videos"][names[0]], results["videos"][names[-1]]
        results[f"long_over_short_{suffix}"] = round(long["ours_cpu_s"] / short["ours_cpu_s"], 3)
    results["remote"] = {
        f"{long_seconds}s.{suffix}": remote_read(videos[f"{long_seconds}s.{suffix}"], delay)
        for suffix in ("mp4", "mkv")
    }
    results["remote_delay_s"] = delay
    results["decode_counts"] = decode_counts()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bagel-data bench video", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SECONDS} s videos instead of {FULL_SECONDS} s")
    parser.add_argument("--out", default="benchmarks/video_results.json", help="where the JSON goes")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per figure (the median is reported)")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per object-store round trip")
    parser.add_argument("--video-dir", help="keep the generated videos here (reused when present)")
    args = parser.parse_args(argv)
    durations = QUICK_SECONDS if args.quick else FULL_SECONDS
    with contextlib.ExitStack() as stack:
        folder = Path(args.video_dir or stack.enter_context(tempfile.TemporaryDirectory()))
        folder.mkdir(parents=True, exist_ok=True)
        results = measure(make_videos(folder, durations), args.rounds, args.delay, max(durations))
        open_gop_seconds = QUICK_OPEN_GOP_SECONDS if args.quick else OPEN_GOP_SECONDS
        results["open_gops"] = measure_open_gops(make_open_gop_videos(folder, open_gop_seconds), args.rounds)
    results["command"] = "bagel-data bench video" + (" --quick" if args.quick else "")
    print(json.dumps(results, indent=2))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
