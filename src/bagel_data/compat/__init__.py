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

Both random sources speak one protocol (`RandomSource`, `compat/streams.py`): the draws
above and `get_state` / `set_state`. The default mode's is `SeededRandom`, a numpy
`Generator` keyed by a `SeedSequence`; nothing asks which one it holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..errors import ConfigError
from ..schema.settings import check_compat
from ..sharding import WorkerShard, WorkerTopology, reference_rank_ids, split_evenly
from .streams import (
    CompatRandom,
    RandomSource,
    ReferenceStream,
    SeededRandom,
    check_pcg64_state,
    reference_frame_picks,
    worker_numpy_seed,
)

__all__ = [
    "CompatPolicy",
    "CompatRandom",
    "RandomSource",
    "ReferenceStream",
    "SeededRandom",
    "check_compat",
    "check_pcg64_state",
    "reference_frame_picks",
    "worker_numpy_seed",
]


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
    def keeps_multi_frame_splits(self) -> bool:
        """CFG dropout never drops one frame of a multi-frame split (it would break the
        split); the reference draws for every CFG item and may drop such a frame."""
        return not self.reference

    @property
    def decides_dropout_at_draw(self) -> bool:
        """CFG dropout is decided when a sample is drawn, from the sample's own generator
        (packing/dropout.py); the reference draws it while packing, from the shared stream."""
        return not self.reference

    @property
    def counts_rope_by_split(self) -> bool:
        """The reference's rotary ids: a text item advances by its split's running length
        (over-counting when a split spans several items); the default mode by its own."""
        return self.reference

    @property
    def replays_shared_stream(self) -> bool:
        """A buffered row is rebuilt by replaying the one stream all groups share, from the
        state saved before it: in order, never on other threads."""
        return self.reference

    @property
    def paces_stage_backlog(self) -> bool:
        """After a schedule's change point, samples waiting from the phase before are packed
        at their group's new pace (packing/pacing.py); the reference takes them at once."""
        return not self.reference

    @property
    def allows_elastic_restart(self) -> bool:
        """The reference has no elastic restart: it would change which rows are read."""
        return not self.reference

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

    @property
    def reads_video_as_reference(self) -> bool:
        """The reference's video reader and order (media/video_reference.py): decord where
        installed, frames folders decoded whole before the draws; the default mode reads
        with PyAV, frames exact (media/video.py)."""
        return self.reference

    # -- the random source --------------------------------------------------------------
    def start_stream(self, data_seed: int) -> CompatRandom:
        """The reference streams, started for an iteration (`seed`, else `data_seed`)."""
        return self.stream.start(data_seed if self.seed is None else self.seed)

    def packer_random(self, data_seed: int, key: Sequence[int]) -> RandomSource:
        """The packer's random source for an iteration: its own, keyed by `key` (the seed,
        rank, worker ...); in compat mode the reference streams, shared with every group."""
        if self.reference:
            return self.start_stream(data_seed)
        return SeededRandom.from_key(key)
