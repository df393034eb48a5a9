"""Benchmark instruments: a stage profiler, a recorder of each sample's image work, the floor.

Both instruments are context managers that wrap library functions for the duration of a
`with` block and put the originals back on exit; nothing changes outside the block, and
the pipeline's own code is untouched. The *floor* replays exactly the decodes and resizes
that the measured packs needed, with Pillow and the same transform objects, and nothing
else: the work no bit-exact data pipeline can avoid on one core. Writing the images' float32
values once is reported beside it (`replay_floor`'s bytes over the measured bandwidth).
"""

from __future__ import annotations

import collections
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import batch as batch_module
from ..families import edit, t2i, vlm
from ..media import jpeg, video
from ..media.images import ImageTransform, decode_image
from ..packing import pack as pack_module
from ..packing.layout import prepare_attention_mask_per_sample as build_mask
from ..sample import SampleBuilder
from ..sources import storage
from ..sources.jsonl import JsonlIndex
from ..sources.parquet import ParquetReader

_now = time.perf_counter
DECODERS = [(t2i, "decode_image"), (edit, "decode_image"), (vlm, "decode_image")]


class Patcher:
    """Replace attributes for the life of a `with` block; restored in reverse order."""

    def __init__(self):
        self._saved: list = []

    def wrap(self, owner, name: str, make) -> None:
        own = name in vars(owner)
        self._saved.append((owner, name, vars(owner).get(name), own))
        setattr(owner, name, make(getattr(owner, name)))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        while self._saved:
            owner, name, value, own = self._saved.pop()
            setattr(owner, name, value) if own else delattr(owner, name)


class StageProfiler:
    """Self time (children excluded) and call count of each pipeline stage inside the block."""

    def __init__(self, tokenizer):
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)
        self._stack: list[float] = []
        self._targets: dict[str, list[tuple[Any, str]]] = {
            "read": [(ParquetReader, "read_row_group"), (JsonlIndex, "read_line")],
            "decode": [*DECODERS, (video, "open_frame"), (video, "decode_frames")],
            "resize": [(ImageTransform, "resize")],
            "to_uint8": [(ImageTransform, "pixels")],
            "tensorize": [(ImageTransform, "to_tensor")],  # direct family iteration only
            "convert_vae": [(pack_module, "pad_images")],  # floats written into padded_images
            "convert_vit": [(pack_module, "stack_patches")],  # floats written into packed_vit_tokens
            "tokenize": [(type(tokenizer), "encode")],
            "pack": [(pack_module.PackBuilder, "add")],
            "mask": [(pack_module, "prepare_attention_mask_per_sample")],
            "to_batch": [(pack_module.PackBuilder, "to_batch")],
            "collate": [(batch_module.SimpleCustomBatch, "__init__")],
        }

    def _timed(self, stage: str, fn):
        stack = self._stack

        def timed(*args, **kwargs):
            stack.append(0.0)
            start = _now()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = _now() - start
                self.seconds[stage] += elapsed - stack.pop()
                self.calls[stage] += 1
                if stack:
                    stack[-1] += elapsed

        return timed

    def __enter__(self):
        self._patcher = Patcher()
        for stage, targets in self._targets.items():
            for owner, name in targets:
                self._patcher.wrap(owner, name, lambda fn, stage=stage: self._timed(stage, fn))
        return self

    def __exit__(self, *exc) -> None:
        self._patcher.__exit__(*exc)

    def breakdown(self, wall_seconds: float) -> dict:
        stages: dict[str, dict[str, float]] = {
            s: {"seconds": self.seconds[s], "calls": self.calls[s]} for s in self._targets
        }
        stages["other"] = {"seconds": max(0.0, wall_seconds - sum(self.seconds.values())), "calls": 0}
        for entry in stages.values():
            entry["share"] = entry["seconds"] / wall_seconds if wall_seconds else 0.0
        return stages


@dataclass
class ImageRecord:
    source: object  # bytes | ("file", path) | ("video", path, indices, position) | ("pixels", image)
    decode_seconds: float
    calls: list = field(default_factory=list)  # (transform, img_num, seconds)


class WorkRecorder:
    """Records which decoded image, through which transform, each built sample holds.

    Identity is by object: a decoder's result, the tensor a transform made from it, and
    the `data_indexes` dict that a packed batch lists. Also times the dense-mask build of
    each packed sample (nested-mask mode).
    """

    def __init__(self):
        self.images: list[ImageRecord] = []
        self.samples: dict[int, tuple[dict, list[tuple[int, int]]]] = {}
        self.mask_seconds: dict[int | None, float] = collections.defaultdict(float)
        self.mask_calls: list[tuple[int | None, list, list]] = []  # (sample key, split_lens, attn_modes)
        self._image_ids: dict[int, tuple] = {}
        self._tensor_ids: dict[int, tuple] = {}
        self._current: int | None = None

    def _add_image(self, image, source, seconds: float) -> int:
        self.images.append(ImageRecord(source, seconds))
        self._image_ids[id(image)] = (weakref.ref(image), len(self.images) - 1)
        return len(self.images) - 1

    @staticmethod
    def _lookup(table: dict, obj):
        entry = table.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else None

    def _wrap_decode(self, fn):
        def decode(source, *args, **kwargs):
            start = _now()
            image = fn(source, *args, **kwargs)
            self._add_image(image, _describe(source), _now() - start)
            return image

        return decode

    def _wrap_open_rgb(self, fn):
        def open_rgb(folder, file):
            start = _now()
            image = fn(folder, file)
            self._add_image(image, ("file", file), _now() - start)
            return image

        return open_rgb

    def _wrap_frames(self, fn):
        def decode_frames(path, indices):
            start = _now()
            images = fn(path, indices)
            seconds = _now() - start  # charged to the first frame: the stream is decoded once
            for position, image in enumerate(images):
                self._add_image(image, ("video", path, tuple(indices), position), seconds if position == 0 else 0.0)
            return images

        return decode_frames

    def _wrap_call(self, fn):
        def call(transform, image, img_num=1):
            start = _now()
            tensor = fn(transform, image, img_num=img_num)
            seconds = _now() - start
            index = self._lookup(self._image_ids, image)
            if index is None:  # not from a recorded decoder: replay its pixels
                index = self._add_image(image, ("pixels", image.copy()), 0.0)
            record = self.images[index]
            record.calls.append((transform, img_num, seconds))
            self._tensor_ids[id(tensor)] = (weakref.ref(tensor), (index, len(record.calls) - 1))
            return tensor

        return call

    def _wrap_build(self, fn):
        def build(builder, *args, **kwargs):
            sample = fn(builder, *args, **kwargs)
            work = {}
            for tensor in builder.image_tensor_list:  # a tensor used twice counts once
                found = self._lookup(self._tensor_ids, tensor)
                if found is not None:
                    work[id(tensor)] = found
            self.samples[id(sample["data_indexes"])] = (sample["data_indexes"], list(work.values()))
            return sample

        return build

    def _wrap_add(self, fn):
        def add(pack, sample):
            self._current = id(sample["data_indexes"])
            try:
                return fn(pack, sample)
            finally:
                self._current = None

        return add

    def _wrap_mask(self, fn):
        def mask(split_lens, attn_modes, *args, **kwargs):
            self.mask_calls.append((self._current, list(split_lens), list(attn_modes)))
            start = _now()
            try:
                return fn(split_lens, attn_modes, *args, **kwargs)
            finally:
                self.mask_seconds[self._current] += _now() - start

        return mask

    def __enter__(self):
        self._patcher = Patcher()
        for owner, name in DECODERS:
            self._patcher.wrap(owner, name, self._wrap_decode)
        self._patcher.wrap(video, "open_frame", self._wrap_open_rgb)
        self._patcher.wrap(video, "decode_frames", self._wrap_frames)
        self._patcher.wrap(ImageTransform, "prepare", self._wrap_call)
        self._patcher.wrap(SampleBuilder, "build", self._wrap_build)
        self._patcher.wrap(pack_module.PackBuilder, "add", self._wrap_add)
        self._patcher.wrap(pack_module, "prepare_attention_mask_per_sample", self._wrap_mask)
        return self

    def __exit__(self, *exc) -> None:
        self._patcher.__exit__(*exc)

    # -- what the packs needed -----------------------------------------------------------
    def work_of(self, packs: list[list[dict]] | None) -> dict[int, set[int]]:
        """{image index: transform-call indices} of the samples in `packs` (all recorded if None)."""
        work: dict[int, set[int]] = collections.defaultdict(set)
        keys = list(self.samples) if packs is None else [id(where) for pack in packs for where in pack]
        for key in keys:
            for image, call in self.samples[key][1]:
                work[image].add(call)
        return dict(work)

    def image_seconds(self, key: int) -> float:
        """Decode + transform seconds, as measured in the pipeline, of one sample's images."""
        calls = self.samples[key][1]
        decoded = {image for image, _ in calls}
        return sum(self.images[i].decode_seconds for i in decoded) + sum(self.images[i].calls[c][2] for i, c in calls)

    def mask_rows(self, packs: list[list[dict]]) -> list[tuple[str, bool, float, float]]:
        """(group, has images, mask seconds, image-work seconds) of each packed sample, in order."""
        rows: list[tuple[str, bool, float, float]] = []
        for where in (w for pack in packs for w in pack):
            key = id(where)
            rows.append(
                (where["dataset_name"], bool(self.samples[key][1]), self.mask_seconds[key], self.image_seconds(key))
            )
        return rows

    def warm_mask_rows(self, packs: list[list[dict]], rounds: int = 3) -> list[tuple[str, bool, float, float]]:
        """Like `mask_rows`, but each sample's mask is rebuilt `rounds` times in a row (best
        kept), so it lands in pages just freed: the build's own cost, without the first touch
        of fresh memory (which on the development VM comes from the host, see bench.py)."""
        calls = {key: (split_lens, attn_modes) for key, split_lens, attn_modes in self.mask_calls}
        rows: list[tuple[str, bool, float, float]] = []
        for where in (w for pack in packs for w in pack):
            key = id(where)
            best = best_seconds(build_mask, *calls[key], rounds=rounds)
            rows.append((where["dataset_name"], bool(self.samples[key][1]), best, self.image_seconds(key)))
        return rows

    def jpeg_work(self, work: dict[int, set[int]]) -> list[tuple[bytes, list]]:
        """(encoded JPEG, [(transform, img_num)]) for the recorded JPEG images in `work`."""
        out = []
        for index in sorted(work):
            data = load_source(self.images[index].source)
            if isinstance(data, bytes) and data[:2] == b"\xff\xd8":
                calls = self.images[index].calls
                out.append((data, [calls[c][:2] for c in sorted(work[index])]))
        return out


def best_seconds(fn, *args, rounds: int) -> float:
    """The fastest of `rounds` calls of `fn(*args)`; each result is dropped before the next."""
    best = float("inf")
    for _ in range(rounds):
        start = _now()
        result = fn(*args)
        best = min(best, _now() - start)
        del result
    return best


def mask_report(runs: list[list[tuple]]) -> dict:
    """Dense-mask build time against the image work of the same packed samples, per group.

    `runs` are `mask_rows` of repeated identical runs; each sample keeps its fastest times.
    """
    rows = [(r[0][0], r[0][1], min(x[2] for x in r), min(x[3] for x in r)) for r in zip(*runs)]
    report: dict[str, Any] = {"text_only_samples": sum(not r[1] for r in rows), "by_group": {}}
    for group in sorted({r[0] for r in rows}) + ["all"]:
        report["by_group"][group] = _mask_stats([(r[2], r[3]) for r in rows if r[1] and group in ("all", r[0])])
    return report


def _mask_stats(pairs: list[tuple[float, float]]) -> dict:
    ratios = [mask / image for mask, image in pairs if image > 0]
    return {
        "samples": len(pairs),
        "mask_cheaper_than_images": sum(mask < image for mask, image in pairs),
        "max_mask_to_image_ratio": max(ratios, default=0.0),
        "median_mask_to_image_ratio": float(np.median(ratios)) if ratios else 0.0,
        "mask_seconds": sum(mask for mask, _ in pairs),
        "image_seconds": sum(image for _, image in pairs),
    }


def _describe(source):
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, str):
        return ("file", source)
    return ("file", getattr(source, "name", None) or getattr(source, "path", None))


def load_source(source):
    """What the floor starts from: encoded bytes in memory (files read beforehand), or the record."""
    if isinstance(source, tuple) and source[0] == "file":
        return storage.read_bytes(source[1])
    return source


def _decode(source, video_cache: dict):
    if isinstance(source, bytes):
        return decode_image(source)  # with jpeg.decode_exact off: Pillow's decode
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
    with Patcher() as patcher:
        patcher.wrap(jpeg, "decode_exact", lambda fn: lambda *args: None)  # Pillow only
        start = _now()
        for index, calls in work.items():
            image = _decode(sources[index], video_cache)
            for call in sorted(calls):
                transform, img_num, _ = recorder.images[index].calls[call]
                resized = transform.resize(image, img_num=img_num)
                nbytes += 4 * 3 * resized.size[0] * resized.size[1]
        seconds = _now() - start
    return {"seconds": seconds, "float32_bytes": nbytes}
