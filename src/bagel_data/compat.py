"""`compat="bagel"`: reproducing the reference pipeline exactly, draw for draw.

The mode switches off each deliberate difference of SPEC section 8 that changes which rows
are read or how they are packed (docs/compat.md lists them). This module holds what the
mode needs beyond those switches: the check of the `compat` value, and the private random
generators that stand in for the reference's global ones.

The reference draws from the global `random` (group choice, caption and edit choices,
frame positions, CFG dropout) and from numpy's global generator (timesteps, frame counts),
one stream per process. `CompatRandom` holds a private `random.Random` and a private
`numpy.random.RandomState`, seeded as torch seeds those globals in a DataLoader worker:

* `random`: `get_worker_info().seed` (torch's base seed + worker id);
* numpy: `torch.utils.data._utils.worker._generate_state(base_seed, worker_id)`.

Outside a DataLoader worker both come from `compat_seed` (`random.Random(compat_seed)` and
`RandomState(compat_seed)`, as `random.seed` / `np.random.seed` would make them); the
caller passes it, and it defaults to the data seed. The caller's global generators are
never read or seeded.
"""

from __future__ import annotations

import random
import sys

import numpy as np
import torch

from .errors import ConfigError

COMPAT_MODES = (None, "bagel")


def check_compat(value, key: str = "compat"):
    """`value` if it is a known compat mode, else a ConfigError naming key, value and fix."""
    if value not in COMPAT_MODES:
        raise ConfigError(
            key,
            value,
            'use compat="bagel" to reproduce the reference pipeline exactly, or leave it unset (None) '
            "for the default mode (docs/compat.md lists the differences)",
        )
    return value


def worker_numpy_seed(base_seed: int, worker_id: int):
    """The numpy seed torch gives DataLoader worker `worker_id` of a loader with `base_seed`."""
    from torch.utils.data._utils.worker import _generate_state

    return _generate_state(base_seed, worker_id)


class CompatRandom:
    """The reference's two global streams, private: `py` (random) and `np` (numpy legacy).

    It offers the subset of `numpy.random.Generator` the packer and families call, each
    mapped to the draw the reference makes at that point:

    * `random()` -> `random.random()` (group choice, CFG dropout, the edit coin);
    * `integers(low, high)` -> `random.choice(range(low, high))` (caption, edit steps,
      instruction phrasing, frame positions);
    * `standard_normal()` -> `np.random.randn()` (flow-matching timesteps);
    * `permutation(n)` -> `np.random.permutation(n)` (frame fallback);
    * `frame_count(low, high)` -> `np.random.randint(low, high)`.
    """

    def __init__(self, py_seed, np_seed):
        self.py = random.Random(py_seed)
        self.np = np.random.RandomState(np_seed)

    @classmethod
    def for_context(cls, compat_seed: int) -> CompatRandom:
        """Seeded as the reference's globals are in this process: a DataLoader worker's
        seeds when in one, else `compat_seed`."""
        info = torch.utils.data.get_worker_info()
        if info is None:
            return cls(compat_seed, compat_seed)
        base_seed = info.seed - info.id
        return cls(info.seed, worker_numpy_seed(base_seed, info.id))

    # -- draws ------------------------------------------------------------------------------
    def random(self) -> float:
        return self.py.random()

    def integers(self, low, high=None):
        if high is None:
            low, high = 0, low
        if np.ndim(low) or np.ndim(high):
            return np.array([self.py.choice(range(int(a), int(b))) for a, b in zip(low, high)], dtype=np.int64)
        low, high = int(low), int(high)
        if high - low > sys.maxsize:  # choice() cannot take a range this long; randrange draws the same way
            return self.py.randrange(low, high)
        return self.py.choice(range(low, high))

    def standard_normal(self) -> float:
        return float(self.np.randn())

    def permutation(self, n: int) -> np.ndarray:
        return self.np.permutation(n)

    def frame_count(self, low: int, high: int) -> int:
        return int(self.np.randint(low, high))

    # -- state ------------------------------------------------------------------------------
    def get_state(self) -> dict:
        """Both streams' state as plain lists and ints (JSON- and torch.save-friendly)."""
        version, internal, gauss = self.py.getstate()
        name, keys, pos, has_gauss, cached = self.np.get_state(legacy=True)  # the 5-tuple form
        return {
            "compat": "bagel",
            "python": [version, list(internal), gauss],
            "numpy": [name, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)],
        }

    def set_state(self, state: dict) -> None:
        version, internal, gauss = state["python"]
        self.py.setstate((version, tuple(internal), gauss))
        name, keys, pos, has_gauss, cached = state["numpy"]
        self.np.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))

    @classmethod
    def from_state(cls, state: dict) -> CompatRandom:
        rng = cls(0, 0)
        rng.set_state(state)
        return rng


def reference_frame_picks(rng: CompatRandom, starts, ends, vlen: int, n: int) -> np.ndarray:
    """The reference's 'rand' frame choice: one `random.choice(range(a, b))` per segment in
    order; at the first empty segment the draws made so far stay spent and a sorted
    `np.random.permutation(vlen)[:n]` is taken instead."""
    picked = []
    for a, b in zip(starts, ends):
        if b <= a:
            return np.sort(rng.permutation(vlen)[:n])
        picked.append(rng.py.choice(range(int(a), int(b))))
    return np.array(picked, dtype=np.int64)
