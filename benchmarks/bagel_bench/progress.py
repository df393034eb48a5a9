"""Progress lines of the benchmark, on stderr (the results table and JSON stay clean)."""

from __future__ import annotations

import sys
import time

_started: list[float] = []


def progress(message: str) -> None:
    """`[bench  12.3 s] message`, seconds counted from the first call in this process."""
    if not _started:
        _started.append(time.perf_counter())
    print(f"[bench {time.perf_counter() - _started[0]:6.1f} s] {message}", file=sys.stderr, flush=True)
