"""The video benchmark's instruments (bagel_bench.video): its Matroska copy and its
object store, which the figures in docs/performance.md rest on."""

from __future__ import annotations

import av
import numpy as np
import pytest

from bagel_bench import video as bench_video
from helpers.videos import has_x264, make_h264


@pytest.mark.skipif(not has_x264(), reason="this PyAV wheel has no libx264")
def test_remux_keeps_every_packet_and_drops_the_count(tmp_path):
    source = make_h264(tmp_path / "clip.mp4", 36, gop=12)
    target = tmp_path / "clip.mkv"
    bench_video.remux(tmp_path / "clip.mp4", target)
    with av.open(source) as a, av.open(str(target)) as b:
        assert b.streams.video[0].frames == 0
        first = [f.to_ndarray(format="rgb24") for f in a.decode(video=0)]
        second = [f.to_ndarray(format="rgb24") for f in b.decode(video=0)]
    assert len(first) == len(second) == 36
    assert all(np.array_equal(x, y) for x, y in zip(first, second))


@pytest.mark.skipif(not has_x264(), reason="this PyAV wheel has no libx264")
def test_object_store_counts_what_a_remote_sample_fetches(tmp_path):
    path = tmp_path / "clip.mkv"
    make_h264(path, 4800, gop=48, bframes=0)
    result = bench_video.remote_read(path, delay=0.0)
    cold, warm = result["cold"], result["warm"]
    # The first reader demuxes Matroska whole, then decodes again around the sampled GOPs.
    assert cold["bytes"] >= result["file_bytes"] == path.stat().st_size
    # Another reader finds the table on the node and fetches what it decodes.
    assert warm["bytes"] < 0.5 * result["file_bytes"], (warm, result["file_bytes"])
    assert cold["opens"] == warm["opens"] == 2 and warm["reads"] >= 2
    assert all(side["wall_s"] >= 0 and side["cpu_s"] >= 0 for side in (cold, warm))
