"""The benchmark's instruments reach the pipeline through the library's seams: the profiler
times each stage wherever it is marked, the recorder ties decoded images to samples."""

from __future__ import annotations

import io

from PIL import Image

from bagel_bench.profiler import ROWS, StageProfiler
from bagel_bench.recorder import WorkRecorder
from bagel_data.instruments import SEAMS, STAGES
from bagel_data.media.images import ImageTransform, decode_image


def _jpeg(size=(64, 48)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, format="JPEG")
    return out.getvalue()


def test_every_row_sums_library_stages_and_every_timed_stage_exists():
    timed = [stage for stages in ROWS.values() for stage in stages]
    assert len(timed) == len(set(timed)) and set(timed) <= set(STAGES)
    assert set(STAGES) - set(timed) == {"open", "prepare", "build"}  # containers of timed stages, or I/O alone


def test_the_profiler_counts_each_stage_as_self_time_and_detaches():
    transform = ImageTransform(64, 16, 16, 5000, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    with StageProfiler() as profiler:
        image = decode_image(_jpeg())
        transform.prepare(image)  # resize + to_uint8 inside `prepare`, which is not a row
        transform.prepare(image)
    decode_image(_jpeg())  # after the block: not counted
    assert profiler.calls["decode"] == 1 and profiler.calls["resize"] == 2 and profiler.calls["to_uint8"] == 2
    assert profiler.calls["tensorize"] == 0 and all(s >= 0 for s in profiler.seconds.values())
    shares = profiler.breakdown(wall_seconds=sum(profiler.seconds.values()) + 1.0)
    assert abs(sum(row["share"] for row in shares.values()) - 1) < 1e-9
    assert all(point.instrument is None for point in SEAMS.values())


def test_the_recorder_ties_a_prepared_image_to_its_decode():
    transform = ImageTransform(64, 16, 16, 5000, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    data = _jpeg()
    with WorkRecorder() as recorder:
        image = decode_image(data)
        transform.prepare(image, img_num=2)
        transform.prepare(Image.new("RGB", (32, 32)))  # not decoded here: its pixels are kept
    assert len(recorder.images) == 2 and recorder.images[0].source == data
    assert [(t, n) for t, n, _ in recorder.images[0].calls] == [(transform, 2)]
    assert recorder.images[1].source[0] == "pixels" and len(recorder.images[1].calls) == 1
