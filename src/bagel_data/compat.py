"""`compat="bagel"`: reproducing the reference pipeline exactly, draw for draw.

The mode switches off each deliberate difference that changes which rows are read or how
they are packed (docs/compat.md lists them). It is one `CompatPolicy`, decided once at the
entrance from the `compat` and `compat_seed` settings and handed to the packer and to every
family the entrance builds: sharding, file order, the drop at emit, the VLM rules and the
random source are all asked of it, never of the `compat` string.

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

import contextlib
import dataclasses
import random
import sys
from collections.abc import Iterator

import numpy as np
import torch

from .errors import ConfigError
from .schema.settings import check_compat
from .sharding import WorkerShard, WorkerTopology, reference_rank_ids, split_evenly


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


@dataclasses.dataclass(frozen=True)
class CompatPolicy:
    """What `compat` decides, asked in one place. `mode` None is the default mode; "bagel"
    the reference's behaviour. `seed` (the `compat_seed` setting) seeds the reference
    streams outside DataLoader workers, defaulting to the data seed."""

    mode: str | None = None
    seed: int | None = None
    stream: ReferenceStream = dataclasses.field(default_factory=ReferenceStream, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_compat(self.mode)

    @classmethod
    def of(cls, value: CompatPolicy | str | None) -> CompatPolicy:
        """The policy itself, or a new one for a `compat` value (a family built on its own)."""
        return value if isinstance(value, CompatPolicy) else cls(check_compat(value))

    @property
    def reference(self) -> bool:
        """True in compat mode: the reference's rules and draws."""
        return self.mode is not None

    # -- which units are read -----------------------------------------------------------
    def rank_unit_ids(self, num_units: int, world_size: int, rank: int) -> range:
        """This rank's units; the reference drops the remainder, the default mode reads it."""
        if self.reference:
            return reference_rank_ids(num_units, world_size, rank)
        return split_evenly(num_units, world_size, rank)

    def worker_shard(self, topology: WorkerTopology, num_units: int) -> WorkerShard:
        return topology.shard(num_units, reference=self.reference)

    def file_order(self, requested: str | None) -> str:
        """A group's parquet listing order: `sorted` by default, `filesystem` (`os.listdir`,
        the reference's) in compat mode, where asking for `sorted` is a contradiction."""
        if requested is None:
            return "filesystem" if self.reference else "sorted"
        if self.reference and requested != "filesystem":
            raise ConfigError(
                "file_order",
                requested,
                f'compat="{self.mode}" lists folders as the reference did (filesystem order); drop file_order '
                "or set it to filesystem",
            )
        return requested

    # -- rows and packs -----------------------------------------------------------------
    @property
    def drops_sample_at_emit(self) -> bool:
        """The reference drops the sample that made a pack go out; the default mode keeps it."""
        return self.reference

    @property
    def takes_rows_as_they_are(self) -> bool:
        """The reference's VLM and edit rules: rows that do not fit the format are used as
        the reference used them, not skipped."""
        return self.reference

    @property
    def decodes_as_reference(self) -> bool:
        """The reference's image conversion (stored pixels: no EXIF turn, no colour profile,
        LA's alpha dropped, 16-bit clipped); the default mode shows photos as a viewer does
        (media/photos.py)."""
        return self.reference

    # -- the random source --------------------------------------------------------------
    def start_stream(self, data_seed: int) -> CompatRandom:
        """The reference streams, started for an iteration (`seed`, else `data_seed`)."""
        return self.stream.start(data_seed if self.seed is None else self.seed)
