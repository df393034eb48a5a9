"""Large, zeroed, short-lived batch buffers, allocated so that first touch is cheap.

Every pack gets a fresh `padded_images` tensor of ~100 MB. glibc serves such sizes with a
fresh `mmap`, so each pack pays one page fault per 4 KiB page on first write: about half of
`to_batch` on the benchmark (see benchmarks/NOTES.md). Mapping the buffer ourselves and
asking for transparent huge pages (`MADV_HUGEPAGE`, honoured when the kernel's THP mode is
`madvise` or `always`) makes that one fault per 2 MiB. The kernel hands out zeroed pages, so
no fill is needed. Nothing global changes: only this mapping is advised.

Where `mmap` lacks `MADV_HUGEPAGE` (not Linux) or the buffer is small, `torch.zeros` is used.
"""

from __future__ import annotations

import math
import mmap

import torch

# Below this, the allocator's own arenas are already warm and huge pages would waste memory.
HUGE_PAGE_MIN_BYTES = 8 << 20
_CAN_ADVISE = hasattr(mmap, "MADV_HUGEPAGE")


def zeroed_float32(shape: tuple[int, ...]) -> torch.Tensor:
    """A float32 tensor of zeros that owns its memory, backed by huge pages when large."""
    nbytes = math.prod(shape) * 4
    if not _CAN_ADVISE or nbytes < HUGE_PAGE_MIN_BYTES:
        return torch.zeros(shape, dtype=torch.float32)
    mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # THP disabled for this process: still correct, just 4 KiB pages
        pass
    # The tensor keeps the mapping alive; it is unmapped when the last view goes.
    return torch.frombuffer(mapping, dtype=torch.float32).view(shape)
