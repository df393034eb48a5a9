"""The random sources of both modes, behind one protocol (`RandomSource`).

`SeededRandom` is the default mode's: a numpy `Generator` keyed by a `SeedSequence`.
`CompatRandom` holds the reference's two global streams, private (`compat/__init__.py`
says how they are seeded); `ReferenceStream` is that pair as the packer and every family
of one entrance share it. Callers draw and save through the protocol and never ask which
source they hold.
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np
import torch


def worker_numpy_seed(base_seed: int, worker_id: int):
    """The numpy seed torch gives DataLoader worker `worker_id` of a loader with `base_seed`."""
    from torch.utils.data._utils.worker import _generate_state

    return _generate_state(base_seed, worker_id)


class RandomSource(Protocol):
    """What the packer and the families draw from, in either mode, and how it is saved."""

    kind: str  # the mode its state belongs to: a checkpoint loads only into the same kind

    def random(self) -> float: ...
    def integers(self, low: Any, high: Any = None) -> Any: ...
    def standard_normal(self) -> float: ...
    def permutation(self, n: int) -> np.ndarray: ...
    def frame_count(self, low: int, high: int) -> int: ...
    def frame_picks(
        self, starts: Sequence[int] | np.ndarray, ends: Sequence[int] | np.ndarray, vlen: int, n: int
    ) -> np.ndarray: ...
    def get_state(self) -> dict: ...
    def set_state(self, state: dict) -> None: ...


_WORD = 0xFFFFFFFF
_PCG64_LIMIT = 1 << 128
_SEED_TAIL_TAG = 0x5EED0032


def seed_tail(seed: int) -> list[int]:
    """What a generator's key appends for a seed beyond 32 bits (its keys hold the seed's low
    word): a tag, the sign and the higher words, so that seeds equal in their low 32 bits
    (5 and 5 + 2**32, -1 and 2**32 - 1) give different streams. Nothing for a seed from 0 to
    2**32 - 1: the streams of such seeds stay what they always were."""
    seed = int(seed)
    if 0 <= seed <= _WORD:
        return []
    words, rest = [], abs(seed) >> 32
    while rest:
        words.append(rest & _WORD)
        rest >>= 32
    return [_SEED_TAIL_TAG, int(seed < 0), *words]


class SeededRandom(np.random.Generator):
    """The default mode's random source: a numpy `Generator` (PCG64) keyed by a list of
    ints, with the `RandomSource` draws the reference's stream also has."""

    kind = "numpy"

    @classmethod
    def from_key(cls, key: Sequence[int]) -> SeededRandom:
        return cls(np.random.PCG64(np.random.SeedSequence([int(value) & _WORD for value in key])))

    def __reduce__(self):  # numpy's own would unpickle a plain Generator
        return (type(self), (self.bit_generator,))

    def frame_count(self, low: int, high: int) -> int:
        return int(self.integers(low, high))

    def frame_picks(
        self, starts: Sequence[int] | np.ndarray, ends: Sequence[int] | np.ndarray, vlen: int, n: int
    ) -> np.ndarray:
        """One frame per segment `[start, end)`; with an empty segment (a one-frame one), a
        sorted random subset of all frames, as the reference falls back to."""
        if np.any(np.asarray(ends) <= np.asarray(starts)):
            return np.sort(self.permutation(vlen)[:n])
        return self.integers(starts, ends)  # end exclusive: a segment's last frame is never drawn

    def get_state(self) -> dict:
        return dict(self.bit_generator.state)

    def set_state(self, state: dict) -> None:
        """Load a state `get_state` gave; ValueError names what is out of range (numpy
        would accept some and fail only at the next draw)."""
        check_pcg64_state(state)
        self.bit_generator.state = state


def as_random_source(rng: RandomSource | np.random.Generator | None) -> RandomSource:
    """`rng` as a `RandomSource`: a caller's own numpy `Generator` (a public function's
    argument) is drawn from through its bit generator, so its state advances as if it had
    drawn itself; None: fresh entropy, as `np.random.default_rng()`."""
    if rng is None:
        return SeededRandom(np.random.PCG64())
    if isinstance(rng, np.random.Generator) and not isinstance(rng, SeededRandom):
        return SeededRandom(rng.bit_generator)  # a caller's own: drawn through its bit generator
    return rng  # already one of ours (the families hand every row a RandomSource)


def check_pcg64_state(state: Any) -> None:
    """A PCG64 state as numpy writes it, each number in range; ValueError otherwise."""
    if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
        raise ValueError(f"a PCG64 generator state, not {str(state)[:80]}")
    inner = state.get("state")
    if not isinstance(inner, dict) or sorted(inner) != ["inc", "state"]:
        raise ValueError("its state holds 'state' and 'inc'")
    for name in ("state", "inc"):
        value = inner[name]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _PCG64_LIMIT:
            raise ValueError(f"state.{name} = {value!r} is not an int in [0, 2**128)")
    if state.get("has_uint32") not in (0, 1):
        raise ValueError(f"has_uint32 = {state.get('has_uint32')!r} is not 0 or 1")
    uinteger = state.get("uinteger")
    if isinstance(uinteger, bool) or not isinstance(uinteger, int) or not 0 <= uinteger <= _WORD:
        raise ValueError(f"uinteger = {uinteger!r} is not an int in [0, 2**32)")


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

    kind = "bagel"

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

    def frame_picks(
        self, starts: Sequence[int] | np.ndarray, ends: Sequence[int] | np.ndarray, vlen: int, n: int
    ) -> np.ndarray:
        return reference_frame_picks(self, starts, ends, vlen, n)

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
        if not isinstance(state, dict) or state.get("compat") != "bagel":
            raise ValueError('the reference streams\' state (compat: "bagel")')
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


class ReferenceStream:
    """compat: the reference's two global streams in one process, shared by the packer and
    every family one entrance built (they are pickled together into each DataLoader worker,
    so they keep sharing it there). `start` makes it anew for an iteration."""

    def __init__(self) -> None:
        self.rng: CompatRandom | None = None

    def start(self, seed: int) -> CompatRandom:
        self.rng = CompatRandom.for_context(seed)
        return self.rng

    def live(self) -> CompatRandom:
        assert self.rng is not None, "the stream starts with the iteration (start)"
        return self.rng

    @contextlib.contextmanager
    def replaying(self, state: dict) -> Iterator[CompatRandom]:
        """The stream as it was at `state` (a buffered row's), for rebuilding that row; the
        live stream is back afterwards, untouched."""
        live, self.rng = self.rng, CompatRandom.from_state(state)
        try:
            yield self.rng
        finally:
            self.rng = live
