"""`WorkRecorder`: which decoded image, through which transform, each built sample holds.

What the floor (`floor.py`) replays, and what the mask report (`mask_cost.py`) weighs the
dense-mask builds against. Like the profiler it attaches to the library's seams
(`bagel_data.instruments`), only inside its `with` block.
"""

from __future__ import annotations

import collections
import contextlib
import time
import weakref
from dataclasses import dataclass, field

from bagel_data.instruments import attached
from bagel_data.packing.layout import prepare_attention_mask_per_sample as build_mask
from bagel_data.sources import storage

from .mask_cost import best_seconds

_now = time.perf_counter


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
        self._block = contextlib.ExitStack()

    def _add_image(self, image, source, seconds: float) -> int:
        self.images.append(ImageRecord(source, seconds))
        self._image_ids[id(image)] = (weakref.ref(image), len(self.images) - 1)
        return len(self.images) - 1

    @staticmethod
    def _lookup(table: dict, obj):
        entry = table.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else None

    # Each instrument below gets `(call, args, kwargs)` at its stage (bagel_data.instruments)
    # and returns what the call returns.
    def _decode(self, call, args, kwargs):
        start = _now()
        image = call(*args, **kwargs)
        self._add_image(image, _describe(args[0]), _now() - start)
        return image

    def _decode_frame(self, call, args, kwargs):  # (folder, file)
        start = _now()
        image = call(*args, **kwargs)
        self._add_image(image, ("file", args[1]), _now() - start)
        return image

    def _decode_video(self, call, args, kwargs):  # (path, indices)
        start = _now()
        images = call(*args, **kwargs)
        seconds = _now() - start  # charged to the first frame: the stream is decoded once
        path, indices = args
        for position, image in enumerate(images):
            self._add_image(image, ("video", path, tuple(indices), position), seconds if position == 0 else 0.0)
        return images

    def _prepare(self, call, args, kwargs):  # (transform, image, img_num=1)
        transform, image = args[:2]
        img_num = kwargs.get("img_num", args[2] if len(args) > 2 else 1)
        start = _now()
        tensor = call(transform, image, img_num=img_num)
        seconds = _now() - start
        index = self._lookup(self._image_ids, image)
        if index is None:  # not from a recorded decoder: replay its pixels
            index = self._add_image(image, ("pixels", image.copy()), 0.0)
        record = self.images[index]
        record.calls.append((transform, img_num, seconds))
        self._tensor_ids[id(tensor)] = (weakref.ref(tensor), (index, len(record.calls) - 1))
        return tensor

    def _build(self, call, args, kwargs):  # (builder, ...)
        sample = call(*args, **kwargs)
        work = {}
        for tensor in args[0].image_tensor_list:  # a tensor used twice counts once
            found = self._lookup(self._tensor_ids, tensor)
            if found is not None:
                work[id(tensor)] = found
        self.samples[id(sample["data_indexes"])] = (sample["data_indexes"], list(work.values()))
        return sample

    def _pack(self, call, args, kwargs):  # (pack builder, sample)
        self._current = id(args[1]["data_indexes"])
        try:
            return call(*args, **kwargs)
        finally:
            self._current = None

    def _mask(self, call, args, kwargs):  # (split_lens, attn_modes, ...)
        self.mask_calls.append((self._current, list(args[0]), list(args[1])))
        start = _now()
        try:
            return call(*args, **kwargs)
        finally:
            self.mask_seconds[self._current] += _now() - start

    def __enter__(self):
        instruments = {
            "decode": self._decode, "decode_frame": self._decode_frame, "decode_video": self._decode_video,
            "prepare": self._prepare, "build": self._build, "pack": self._pack, "mask": self._mask,
        }  # fmt: skip
        self._block.enter_context(attached(instruments))
        return self

    def __exit__(self, *exc) -> None:
        self._block.close()

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
