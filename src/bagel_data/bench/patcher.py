"""`Patcher`: replace attributes for the life of a `with` block, then put the originals back.

The benchmark's instruments (`profiler.py`, `recorder.py`), its floor (`floor.py`) and its
baselines (`physical.py`, `fast.py`) wrap library functions this way: nothing changes
outside the block, and the pipeline's own code is untouched.
"""

from __future__ import annotations


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
