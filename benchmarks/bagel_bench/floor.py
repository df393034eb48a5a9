"""The floor: the image work no bit-exact data pipeline can avoid on one core.

`replay_floor` replays exactly the decodes and resizes that the measured packs needed (as
`WorkRecorder` recorded them), with Pillow and the same transform objects, and nothing
else. Writing the images' float32 values once is reported beside it (its bytes over the
measured bandwidth). The instruments are `profiler.py` and `recorder.py`.
"""

from __future__ import annotations

import time

from bagel_data.media import video
from bagel_data.media.images import decode_image

from .recorder import WorkRecorder, load_source

_now = time.perf_counter


def _decode(source, video_cache: dict):
    if isinstance(source, bytes):
        return decode_image(source)  # Pillow's decode, as in the pipeline
    if source[0] == "video":
        key = source[1:3]
        if key not in video_cache:
            video_cache[key] = video.decode_frames(source[1], list(source[2]))
        return video_cache[key][source[3]]
    return source[1]  # ("pixels", image)


def replay_floor(recorder: WorkRecorder, work: dict[int, set[int]]) -> dict:
    """Pillow decode + Pillow resize of exactly `work`, each image decoded once: `seconds`,
    and the `float32_bytes` that the converted images take (written once, into the batch)."""
    sources = {index: load_source(recorder.images[index].source) for index in work}
    video_cache: dict = {}
    nbytes = 0
    start = _now()
    for index, calls in work.items():
        image = _decode(sources[index], video_cache)
        for call in sorted(calls):
            transform, img_num, _ = recorder.images[index].calls[call]
            resized = transform.resize(image, img_num=img_num)
            nbytes += 4 * 3 * resized.size[0] * resized.size[1]
    seconds = _now() - start
    return {"seconds": seconds, "float32_bytes": nbytes}
