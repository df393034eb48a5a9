"""Shared-memory segments a DataLoader worker writes batch after batch into, each reused only
once every process it was sent to has let go of it.

A worker's batch leaves through shared memory, and a fresh segment per batch pays a tmpfs
page fault for every 4 KiB on first write (buffers.py). A `SegmentPool` lends the same
segments again, so the worker writes into pages it has already touched. The one hard part is
knowing, exactly, when a segment sent to another process is no longer used there. Three
counts decide it, none of them a guess:

* **sends**: this module's reducer for `torch.UntypedStorage`, registered with the
  multiprocessing pickler (`ForkingPickler`) the DataLoader's queues use, counts each time a
  pooled segment is pickled (once per pickle, however many tensors view it) and wraps torch's
  own reduction (the file descriptor, no copy) so that the receiver runs `_rebuild_received`;
* **releases**: the receiver rebuilds the storage with torch's own function and puts a
  `weakref.finalize` on the storage object. torch keeps that Python object alive for as long
  as any tensor, view or numpy array of the storage lives (PyObject preservation, checked at
  run time by `recycling_supported`), so the finalizer runs exactly when the last of them is
  gone: in the training loop, after a pinned or GPU copy replaced the batch's tensors, or
  when the batch is dropped. It adds one to the segment's slot in a small shared int64 array
  that travels with every send;
* **local uses**: the storage's C++ use count in the lending process (1: only the pool).

A segment is lent again only when its local use count is 1 (read first: every pickle of it
has then finished) and its releases equal its sends; otherwise the pool lends another free
segment, makes a new one while it has room, or, full, hands out a fresh segment it does not
keep (the behaviour without a pool). It never waits. The receiver's release is written after
the storage's last reference went through torch's atomic (acquire-release) reference count,
so every read of the segment there comes before it. Recycling is off (fresh segments, as
before) where `recycling_supported` finds torch without the use count, without PyObject
preservation, or pickling a tensor without going through its storage's reducer; a pool also
stops lending again if another reducer is registered over ours, since sends would go uncounted.
A pool lives for one iteration of the packed dataset; a worker's resident memory includes the
touched pages of its up to `DEFAULT_CAPACITY` segments. A batch's small tensors travel
together in one segment (`gather`).

Where recycling would need help it cannot count, it copies instead of sharing: a process that
received a lent segment and pickles it on (to a third process) sends a fresh copy, as does a
process forked from the lender. A forked child's inherited finalizers release nothing.
Segments are torch's own shared storages: with the default `file_descriptor` strategy their
files are unlinked at creation, so nothing is left under /dev/shm when the processes exit;
with `file_system`, torch's manager removes them as it does for any shared tensor.
"""

from __future__ import annotations

import functools
import io
import math
import os
import threading
import weakref
from multiprocessing.reduction import ForkingPickler

import numpy as np
import torch

DEFAULT_CAPACITY = 12  # segments per pool: three per batch (two large tensors, the small ones), ~four batches in flight
_ALIGN = 64  # bytes: where each tensor starts in a gathered segment

_lock = threading.RLock()  # the counts this process writes (reducer, finalizers, lending)
_lent: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # pooled storage -> (pool ref, slot)
_received: weakref.WeakSet = weakref.WeakSet()  # storages this process mapped from another's pool
_inherited: list[torch.UntypedStorage] = []  # a pool's segments in a process forked from its lender
_torch_reduce = None  # the reducer registered for UntypedStorage before ours (torch's)


def _registered_reducer():
    return getattr(ForkingPickler, "_extra_reducers", {}).get(torch.UntypedStorage)


@functools.cache
def recycling_supported() -> bool:
    """Whether this torch counts storage uses and keeps a storage's Python object alive for as
    long as its memory is used: both are what makes the release detection exact."""
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    if use_count is None or _registered_reducer() is None:
        return False
    storage = torch.UntypedStorage(8)
    alone = use_count(storage._cdata) == 1
    view = torch.empty(0, dtype=torch.uint8).set_(storage)[2:]
    used = use_count(storage._cdata) > 1
    seen: list = []  # does pickling a tensor reach the reducer registered for its storage?

    def probe(reached: torch.UntypedStorage, seen: list = seen) -> tuple:
        seen.append(reached)
        return bytes, ()

    pickler = ForkingPickler(io.BytesIO())
    pickler.dispatch_table[torch.UntypedStorage] = probe
    pickler.dump(view)
    reached = len(seen) == 1 and seen[0] is storage
    ref = weakref.ref(storage)
    del storage, seen, pickler, probe  # the pickler memo holds the storage too
    preserved = ref() is not None
    del view
    return alone and used and reached and preserved and ref() is None


def _install_reducer() -> None:
    global _torch_reduce
    with _lock:
        current = _registered_reducer()
        if current is not _reduce_storage:
            _torch_reduce = current
            ForkingPickler.register(torch.UntypedStorage, _reduce_storage)


def _lender(storage: torch.UntypedStorage) -> tuple[SegmentPool | None, int]:
    """(the live pool `storage` is a segment of, its slot), or (None, 0)."""
    pool, slot = _lent.get(storage, (lambda: None, 0))
    pool = pool()
    if pool is None or slot >= len(pool.segments) or pool.segments[slot] is not storage:
        return None, 0
    return pool, slot


def _reduce_storage(storage: torch.UntypedStorage):
    assert _torch_reduce is not None
    pool, slot = _lender(storage)
    if pool is not None and pool.pid == os.getpid():
        with _lock:
            pool.sent[slot] += 1
        rebuild, args = _torch_reduce(storage)
        return _rebuild_received, (pool.counters[0], slot, rebuild, args)
    if pool is not None or storage in _received:
        # Memory another process lends again once it sees it released here: send a copy.
        copy = torch.UntypedStorage._new_shared(storage.nbytes())
        copy.copy_(storage)
        return _torch_reduce(copy)
    return _torch_reduce(storage)  # not lent, or by a pool that is gone: torch's own sharing


def _rebuild_received(released: torch.Tensor, slot: int, rebuild, args) -> torch.UntypedStorage:
    storage = rebuild(*args)
    _install_reducer()  # so that passing it on copies it
    with _lock:
        _received.add(storage)
    weakref.finalize(storage, _release, released.numpy(), slot, os.getpid()).atexit = False
    return storage


def _release(released: np.ndarray, slot: int, pid: int) -> None:
    if os.getpid() == pid:  # not a copy of the finalizer inherited through fork
        with _lock:
            released[slot] += 1


class SegmentPool:
    """Up to `capacity` shared-memory segments, lent again once nothing uses them anywhere."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self.capacity = capacity
        self.enabled = capacity > 0 and recycling_supported()
        self.allocated = self.reused = 0  # segments made (kept or not), segments lent again
        self.pid = os.getpid()
        self.segments: list[torch.UntypedStorage] = []
        self.sent: list[int] = []  # per slot: pickles of it (only this process writes them)
        self.counters: list = []  # [releases per slot (shared int64), its numpy view]: made on first use

    def _is_free(self, slot: int) -> bool:
        # Local uses first: at 1, every pickle of it has finished, so `sent` is complete.
        return (
            torch._C._storage_Use_Count(self.segments[slot]._cdata) == 1 and self.sent[slot] == self.counters[1][slot]
        )

    def float32(self, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, bool]:
        """(a tensor of `shape` in shared memory, float32 unless `dtype` (uint8 pixels), whether
        it is all zeros)."""
        numel = math.prod(shape)
        if self.enabled:
            storage, zeroed = self._lend(numel * dtype.itemsize)
        else:
            self.allocated += 1
            storage, zeroed = torch.UntypedStorage._new_shared(numel * dtype.itemsize), True
        return torch.empty(0, dtype=dtype).set_(storage)[:numel].view(shape), zeroed

    def gather(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Copies of `tensors` (a batch's small ones) as views into one segment of this pool.

        Each shared storage costs the sender a segment and the receiver a file-descriptor
        round trip to the sender, so a batch's dozen small tensors sent apart cost more than
        its two large ones; together they are one storage (pickled once, however many views)."""
        offsets, nbytes = {}, 0
        for name, tensor in tensors.items():
            nbytes = -(-nbytes // _ALIGN) * _ALIGN  # every dtype's elements stay aligned
            offsets[name] = nbytes
            nbytes += tensor.numel() * tensor.element_size()
        if self.enabled:
            storage, _ = self._lend(max(nbytes, _ALIGN))
        else:
            self.allocated += 1
            storage = torch.UntypedStorage._new_shared(max(nbytes, _ALIGN))
        gathered = {}
        for name, tensor in tensors.items():
            offset, numel = offsets[name] // tensor.element_size(), tensor.numel()
            flat = torch.empty(0, dtype=tensor.dtype).set_(storage, offset, (numel,), (1,))
            gathered[name] = flat.view(tensor.shape).copy_(tensor)
        return gathered

    def _lend(self, nbytes: int) -> tuple[torch.UntypedStorage, bool]:
        with _lock:
            if self.pid != os.getpid():  # inherited through fork: the parent still lends these
                _inherited.extend(self.segments)  # so kept mapped here, and copied when sent on
                _received.update(self.segments)
                self.segments, self.sent, self.counters, self.pid = [], [], [], os.getpid()
            if self.segments and _registered_reducer() is not _reduce_storage:
                # Another reducer replaced ours: sends since then were not counted. Lend no
                # segment again (they stay with whoever holds them); fresh ones from now on.
                self.enabled, self.segments, self.sent = False, [], []
                self.allocated += 1
                return torch.UntypedStorage._new_shared(nbytes), True
            free = [slot for slot in range(len(self.segments)) if self._is_free(slot)]
            fits = [slot for slot in free if self.segments[slot].nbytes() >= nbytes]
            if fits:
                self.reused += 1
                return self.segments[min(fits, key=lambda slot: self.segments[slot].nbytes())], False
            # Twice the size asked for: packs vary, and a tmpfs page costs nothing until written.
            storage = torch.UntypedStorage._new_shared(2 * nbytes)
            self.allocated += 1
            if len(self.segments) < self.capacity:
                slot = len(self.segments)
                self.segments.append(storage)
                self.sent.append(0)
            elif free:  # every free segment is too small: replace one (its counts are equal)
                slot = free[0]
                self.segments[slot] = storage
            else:  # every segment is in use: this one is not kept
                return storage, True
            if not self.counters:
                released = torch.zeros(self.capacity, dtype=torch.int64).share_memory_()
                self.counters += [released, released.numpy()]
            _install_reducer()
            _lent[storage] = (weakref.ref(self), slot)
            return storage, True
