"""Physical reference points of the benchmark, and the same-run baseline of the old path.

* `measure_transfer`: what moving each batch to shared memory costs (torch's pickler does
  it for every storage not already shared when a DataLoader worker sends a batch), with the
  batch tensors allocated as in the main process (pooled, copied at send time), in a fresh
  shared-memory segment each (the worker before `packing/segments.py`) and in recycled ones
  (the worker now);
* `parallel_ceiling`: the share of K x one core that K busy processes get on this machine
  (the bound any worker count meets here);
* `previous_path`: the pipeline as it was before `media/convert.py`: floats made in the
  family through a lookup table, then copied into `padded_images` and patchified, for a
  same-run ratio.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import time
from typing import Any

import numpy as np
import torch
from PIL import Image

from bagel_data.batch import collate_wrapper
from bagel_data.instruments import attached
from bagel_data.media.images import ImageTransform
from bagel_data.packing import buffers

_now = time.perf_counter


def _resize_loop(barrier, results, rounds: int) -> None:
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (960, 1280, 3), dtype=np.uint8))
    barrier.wait()  # all K start together
    start = _now()
    for _ in range(rounds):
        image.resize((1000, 750), Image.Resampling.BICUBIC)
    results.put(_now() - start)


def parallel_ceiling(counts, rounds: int = 40) -> dict[int, float]:
    """For each K in `counts`: K processes run the same Pillow resize loop (the floor's kind
    of work) at once; the ceiling is the time alone over the slowest of the K. About 1 on K
    free physical cores; less where the cores are shared (SMT siblings, other tenants)."""
    # fork: the children need nothing but Pillow, and start in milliseconds
    fork = "fork" in multiprocessing.get_all_start_methods()
    context: Any = multiprocessing.get_context("fork" if fork else "spawn")
    seconds: dict[int, float] = {}
    for k in sorted({1, *counts}):
        barrier, results = context.Barrier(k), context.Queue()
        procs = [context.Process(target=_resize_loop, args=(barrier, results, rounds)) for _ in range(k)]
        for proc in procs:
            proc.start()
        seconds[k] = max(results.get(timeout=600) for _ in procs)
        for proc in procs:
            proc.join()
    return {k: seconds[1] / seconds[k] for k in counts}


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif hasattr(value, "__dict__"):
        yield from _tensors(vars(value))


TRANSFER_MODES = {  # mode: (batch tensors in shared memory, segments a worker's pool keeps)
    "copied_at_send": (False, 0),  # as built in one process: the huge-page pool, copied at send
    "shared_at_birth": (True, 0),  # a fresh shared-memory segment per tensor (the worker before)
    "recycled": (True, buffers.DEFAULT_CAPACITY),  # the worker's SegmentPool (packing/segments.py)
}


def measure_transfer(make_dataset, batches: int) -> dict:
    """Per mode (`TRANSFER_MODES`): seconds to build `batches` collated packs, and seconds to
    move every tensor of them to shared memory (what sending them to the main process costs).
    Each batch is dropped before the next is built, as a main process that releases every
    batch at once would: in `recycled`, each pack is written into segments already touched."""
    result = {}
    for mode, (shared, capacity) in TRANSFER_MODES.items():
        collate, build_s, share_s, nbytes = collate_wrapper(), 0.0, 0.0, 0
        dataset = make_dataset()
        dataset.pad_pool_factory = functools.partial(buffers.PadBufferPool, shared=shared, shared_capacity=capacity)
        iterator = iter(dataset)
        for _ in range(batches):
            start = _now()
            batch = collate([next(iterator)])
            middle = _now()
            for tensor in _tensors(batch):
                nbytes += tensor.nbytes
                tensor.share_memory_()  # a no-op for storages already in shared memory
            build_s, share_s = build_s + middle - start, share_s + _now() - middle
            del batch
        iterator.close()
        result[mode] = {"build_seconds": build_s, "share_seconds": share_s, "bytes": nbytes,
                        "total_seconds": build_s + share_s}  # fmt: skip
    return result


def _lookup_table_tensor(transform: ImageTransform, image: Image.Image) -> torch.Tensor:
    """The conversion before media/convert.py: a float32 table per channel, gathered with numpy."""
    levels = np.arange(256, dtype=np.float32) / np.float32(255)
    table = [(levels - np.float32(m)) / np.float32(s) for m, s in zip(transform.image_mean, transform.image_std)]
    pixels = np.asarray(image.convert("RGB"), dtype=np.uint8)
    chw = np.empty((3, pixels.shape[0], pixels.shape[1]), dtype=np.float32)
    for channel in range(3):
        np.take(table[channel], pixels[:, :, channel], out=chw[channel])
    return torch.from_numpy(chw)


def _whole_transform(call, args, kwargs) -> torch.Tensor:
    """At the `prepare` seam: the transform's float tensor (`__call__`), not pending pixels."""
    transform, image = args[:2]
    return transform(image, img_num=kwargs.get("img_num", args[2] if len(args) > 2 else 1))


def previous_path() -> contextlib.AbstractContextManager:
    """Baseline: float tensors made in the family (lookup table), then padded /
    patchified copies in the packer, as before media/convert.py (the library's `prepare`
    and `tensorize` stages stood in for, for the block)."""
    return attached({
        "prepare": _whole_transform,
        "tensorize": lambda call, args, kwargs: _lookup_table_tensor(*args),
    })  # fmt: skip


def same_batches(make_dataset, batches: int) -> bool:
    """Whether the first `batches` packs are bit-identical (every tensor, every other field)
    built now and built through `previous_path`."""
    runs = []
    for path in (contextlib.nullcontext(), previous_path()):
        with path:
            iterator = iter(make_dataset())
            runs.append([next(iterator) for _ in range(batches)])
            iterator.close()
    return all(_equal(a, b) for a, b in zip(*runs))


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b
