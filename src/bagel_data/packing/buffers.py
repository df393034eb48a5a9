"""Large, short-lived batch buffers (`padded_images`, `packed_vit_tokens`), allocated so that
first touch is cheap.

Every pack needs a ~100 MB `padded_images` and often tens of MB of `packed_vit_tokens`. A
fresh allocation of that size is a fresh `mmap`, so each pack would pay one page fault per
4 KiB page on first write: about half of `to_batch` on the benchmark before `padded_images`
was pooled, and the larger part of the pipeline's page faults before `packed_vit_tokens`
was (benchmarks/NOTES.md). Two remedies, both without touching any global setting:

* the buffer is an anonymous mapping advised `MADV_HUGEPAGE` (honoured when the kernel's
  transparent-huge-page mode is `madvise` or `always`): one fault per 2 MiB, and the kernel
  hands the pages out zeroed;
* a `PadBufferPool` (one per iteration of a packed dataset) reuses a mapping once no tensor
  uses it any more, separately for each of the two tensors. The test is exact:
  `torch.frombuffer` keeps a reference to the mapping for as long as any tensor, view or
  storage of it lives (and drops it when the storage moves to shared memory on its way out
  of a DataLoader worker), so a mapping that only the pool references is free.

Where `mmap` lacks `MADV_HUGEPAGE` (not Linux) or the buffer is under `POOL_MIN_BYTES`,
`torch.zeros` (or `torch.empty`) is used.

In a DataLoader worker the batch leaves through shared memory: torch's pickler copies every
storage that is not shared yet into a new shared-memory segment. So there (`shared=True`,
the default inside a worker) the large batch tensors (`padded_images`, `packed_vit_tokens`)
are written into shared memory from the start; sending them copies nothing. The batch's
small tensors follow them there, together in one more segment (`gather_small`). A fresh
segment per batch would pay a tmpfs page fault per 4 KiB on first write (tmpfs gets no huge pages
here), so the pool lends them from a `SegmentPool` (segments.py): shared segments written
again once every process they were sent to has dropped every tensor and view of them,
counted exactly (sends by a reducer for torch's storages, releases by a finalizer on the
received storage), never guessed; when none is free, a fresh one, as before. This works
with any collate function and with torch's own DataLoader. benchmarks/NOTES.md has the
measured cost of each way.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import sys

import torch

from ..instruments import seam
from ..media.convert import PendingImage, PendingPatches
from .segments import DEFAULT_CAPACITY, SegmentPool

# Below this, the allocator's own arenas are already warm and huge pages would waste memory.
HUGE_PAGE_MIN_BYTES = 8 << 20
# Pooled from this size up: a pack's tensors of a few MiB still came back as fresh pages
# from the allocator now and then (page faults counted per stage on the benchmark).
POOL_MIN_BYTES = 1 << 20
_CAN_ADVISE = hasattr(mmap, "MADV_HUGEPAGE")


def _huge_mapping(nbytes: int) -> mmap.mmap:
    mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(OSError):  # THP disabled for this process: still correct, just 4 KiB pages
        mapping.madvise(mmap.MADV_HUGEPAGE)
    return mapping


def _view(mapping: mmap.mmap, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    # The tensor keeps the mapping alive; it is unmapped when the last view goes.
    return torch.frombuffer(mapping, dtype=dtype, count=math.prod(shape)).view(shape)


def _nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def in_worker() -> bool:
    return torch.utils.data.get_worker_info() is not None


# Every buffer here is float32 unless `dtype` says otherwise (uint8: `pixel_format: uint8`).


def shared_float32(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A tensor in a fresh shared-memory segment (zero-filled by the kernel)."""
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is None:  # not in this torch: share an empty buffer (one extra pass)
        return torch.zeros(shape, dtype=dtype).share_memory_()
    storage = new_shared(_nbytes(shape, dtype))
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)


def empty_float32(
    shape: tuple[int, ...], shared: bool | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """A tensor to be written in full: in shared memory when `shared` (None: when running in
    a DataLoader worker)."""
    if in_worker() if shared is None else shared:
        return shared_float32(shape, dtype)
    return torch.empty(shape, dtype=dtype)


def zeroed_float32(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A tensor of zeros that owns its memory, backed by huge pages when large."""
    if not _CAN_ADVISE or _nbytes(shape, dtype) < HUGE_PAGE_MIN_BYTES:
        return torch.zeros(shape, dtype=dtype)
    return _view(_huge_mapping(_nbytes(shape, dtype)), shape, dtype)


class _MappingPool:
    """Up to `capacity` huge-page mappings, each lent again once no tensor uses it."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.mappings: list[mmap.mmap] = []
        self._idle_counts: list[int] = []  # each mapping's reference count when nothing uses it

    def _is_free(self, index: int) -> bool:
        return sys.getrefcount(self.mappings[index]) == self._idle_counts[index]

    def lend(self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, bool]:
        """(a view of `shape` into a mapping, whether it is all zeros)."""
        nbytes = _nbytes(shape, dtype)
        free = [i for i in range(len(self.mappings)) if self._is_free(i)]
        for index in free:
            if len(self.mappings[index]) >= nbytes:
                return _view(self.mappings[index], shape, dtype), False
        # Twice the size asked for: packs vary, and untouched pages of a private anonymous
        # mapping cost address space only, so a later, larger pack can still reuse it.
        if len(self.mappings) < self.capacity:
            index = len(self.mappings)
            self.mappings.append(_huge_mapping(2 * nbytes))
            self._idle_counts.append(0)
        elif free:  # a free mapping too small for this pack: keep a larger one instead
            index = free[0]
            self.mappings[index] = _huge_mapping(2 * nbytes)
        else:  # every pooled mapping is in use: this one is not pooled
            return _view(_huge_mapping(2 * nbytes), shape, dtype), True
        # Measured, not assumed, while only the list refers to it: what "free" looks like.
        self._idle_counts[index] = sys.getrefcount(self.mappings[index])
        return _view(self.mappings[index], shape, dtype), True


class PadBufferPool:
    """Huge-page mappings for a pack's two large tensors, lent again once nothing uses them.

    `padded_images` and `packed_vit_tokens` each have their own `capacity` mappings (two by
    default: a training loop usually still holds the previous batch while the next one is
    built), so the two sizes never evict each other. Resident memory is what packs have
    touched: at most `capacity` x the largest pack's tensors. Where the batch tensors go to
    shared memory (`shared`), they come from a `SegmentPool` of up to `shared_capacity`
    segments instead.
    """

    def __init__(self, capacity: int = 2, shared: bool | None = None, shared_capacity: int = DEFAULT_CAPACITY):
        self.capacity = capacity
        self.shared = shared  # None: in shared memory when running in a DataLoader worker
        self.shared_capacity = shared_capacity
        self.segments: SegmentPool | None = None  # made on first use in shared memory
        self._padded = _MappingPool(capacity)
        self._tokens = _MappingPool(capacity)

    @property
    def mappings(self) -> list[mmap.mmap]:
        """The `padded_images` mappings kept."""
        return self._padded.mappings

    def _in_shared_memory(self) -> bool:
        return in_worker() if self.shared is None else self.shared

    def _segments(self) -> SegmentPool:
        if self.segments is None:
            self.segments = SegmentPool(self.shared_capacity)
        return self.segments

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A buffer of `shape` to be written in full (its content is arbitrary), e.g.
        `packed_vit_tokens`: a fresh one would pay a page fault per 4 KiB on first write."""
        if self._in_shared_memory():
            return self._segments().float32(shape, dtype)[0]
        if not _CAN_ADVISE or _nbytes(shape, dtype) < POOL_MIN_BYTES:
            return torch.empty(shape, dtype=dtype)
        return self._tokens.lend(shape, dtype)[0]

    def gather_small(self, batch: dict) -> None:
        """In shared memory, moves the batch's tensors not yet there into one segment together
        (`SegmentPool.gather`): sending a batch then passes three storages, not a dozen."""
        if not self._in_shared_memory():
            return
        small = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor) and not v.is_shared()}
        if small:
            batch.update(self._segments().gather({k: v.contiguous() for k, v in small.items()}))

    def float32(self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, bool]:
        """(a buffer of `shape`, float32 unless `dtype`, whether it is all zeros); a reused
        one is not."""
        if self._in_shared_memory():
            return self._segments().float32(shape, dtype)
        if not _CAN_ADVISE or _nbytes(shape, dtype) < POOL_MIN_BYTES:
            return torch.zeros(shape, dtype=dtype), True
        return self._padded.lend(shape, dtype)


@seam("convert_vae")
def pad_images(images: list, pool: PadBufferPool | None = None) -> torch.Tensor:
    """Stack images zero-padded (bottom/right) to the largest height and width.

    A `PendingImage` is converted straight into its slot (`media/convert.py`)."""
    channels = max(image.shape[0] for image in images)
    height = max(image.shape[1] for image in images)
    width = max(image.shape[2] for image in images)
    shape = (len(images), channels, height, width)
    padded, zeroed = pool.float32(shape) if pool is not None else (zeroed_float32(shape), True)
    for index, image in enumerate(images):
        c, h, w = image.shape
        if isinstance(image, PendingImage):
            image.write_into(padded[index, :c, :h, :w])
        else:
            padded[index, :c, :h, :w] = image
        if not zeroed:  # a reused buffer: clear only what the image does not cover
            padded[index, :c, :h, w:] = 0
            padded[index, :c, h:, :] = 0
            padded[index, c:] = 0
    return padded


@seam("convert_vit")
def stack_patches(parts: list, pool: PadBufferPool | None = None) -> torch.Tensor:
    """`torch.cat` of the images' patch rows; `PendingPatches` are converted in place there."""
    width = parts[0].width if isinstance(parts[0], PendingPatches) else parts[0].shape[1]
    shape = (sum(len(part) for part in parts), width)
    out = pool.empty(shape) if pool is not None else empty_float32(shape)
    row = 0
    for part in parts:
        rows = out[row : row + len(part)]
        part.write_into(rows) if isinstance(part, PendingPatches) else rows.copy_(part)
        row += len(part)
    return out
