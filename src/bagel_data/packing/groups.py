"""The groups as the packer sees them: one typed interface per group, and the draws.

`GroupSource` is one group (a family dataset under its name) with everything the packer
and the checkpoint ask of it: its samples after a cursor, a sample rebuilt at a cursor,
where a row is (for messages), its dropout generator, its inputs and unit count, its
read-ahead. The families (`DistributedIterableDataset`) are `FamilyGroup`s; any other
group (a test's stand-in, a user's own class with the cursor protocol) gets the plain
defaults. Which one a group is, is decided once, when the packer is built.

`Drawer` is an iteration's draw path: `draw(group)` takes the group's next sample, skips
(counted) one with no items, records the cursor, decides its CFG dropout (default mode)
and tells the group choice its tokens (`choosers.GroupChoice.drawn`); what comes out is a
typed `Draw`. The cursors are its own state (`DrawState`), saved under `stages.draw` of the
worker's checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from ..checkpoint.checks import CURSORS, check_cursors
from ..checkpoint.state import PackState, plain_cursor, tuple_cursor
from ..compat import CompatPolicy, RandomSource, SeededRandom
from ..compat.streams import seed_tail
from ..errors import SkipLog, SkipReason
from ..families.base import DistributedIterableDataset
from ..families.positions import cursor_problem, reference_mismatch
from ..sample import Draw, Dropout
from ..sharding import stable_hash
from .choosers import GroupChoice
from .config import PackingConfig
from .dropout import CFG_STREAM, any_dropout, decide_dropout


class GroupSource:
    """A group that offers only the cursor protocol (`iter_samples`, `sample_at`,
    `resume_cursor`, `set_epoch`, `strict`, `max_consecutive_failures`)."""

    parallel_rebuild = False  # whether its rows may be rebuilt on other threads
    reads_remote = False  # whether its files are remote (where reading ahead pays by default)

    def __init__(self, index: int, name: str, dataset):
        self.index, self.name, self.dataset = index, name, dataset

    @staticmethod
    def of(index: int, name: str, dataset) -> GroupSource:
        family = isinstance(dataset, DistributedIterableDataset)
        return (FamilyGroup if family else GroupSource)(index, name, dataset)

    # -- samples ---------------------------------------------------------------------------
    def samples(self, after: tuple | None, log: SkipLog, read_ahead: int) -> Iterator[tuple[tuple, dict]]:
        """(cursor, sample) pairs after `after`; skips are counted in `log`."""
        return self.dataset.iter_samples(after=after, log=log)

    def sample_at(self, cursor: tuple, rng_state: dict | None, log: SkipLog) -> dict | None:
        """The sample at `cursor` again (`rng_state`: compat's stream before its row)."""
        return self.dataset.sample_at(cursor, rng_state=rng_state, log=log)

    def where(self, row_key: tuple | None, cursor: tuple | None) -> str:
        """A sample's row as messages name it."""
        return f"{self.name} cursor {list(cursor or ())}"

    def dropout_rng(self, data_seed: int, cursor: tuple, row_key: tuple | None) -> RandomSource:
        """The sample's own dropout generator, keyed by the group, the seed and its cursor."""
        return SeededRandom.from_key([data_seed, stable_hash(self.name), *cursor, CFG_STREAM, *seed_tail(data_seed)])

    # -- what a checkpoint records and a start needs ----------------------------------------
    def new_log(self) -> SkipLog:
        return SkipLog(self.name, self.dataset.strict, self.dataset.max_consecutive_failures)

    def resume_cursor(self, worker_id: int) -> tuple | None:
        return self.dataset.resume_cursor(worker_id)

    def input_record(self) -> dict | None:
        return None  # a stand-in records no input files

    def unit_count(self) -> int:
        return 0

    def row_order(self) -> dict | None:
        """What this group's row order depends on (`checkpoint/orders.py`); a stand-in walks
        no rows."""
        return None

    def set_row_order(self, order: dict) -> None:
        """Walk rows in the order a checkpoint was taken under (a stand-in has none)."""

    def cursor_problem(self, cursor: tuple) -> str | None:
        """Why `cursor` names no row of this worker (a stand-in cannot tell: None)."""
        return None

    def reference_mismatch(self) -> str | None:
        """Why a reference position would name another row here (a stand-in cannot tell)."""
        return None

    def set_restart_plan(self, plan) -> None:
        """Run under an elastic restart's plan for this group (`checkpoint/restart.py`), or none."""
        self.dataset.restart_plan = plan

    def set_epoch(self, seed: int) -> None:
        self.dataset.set_epoch(seed)

    def prefetch(self, cursors: list[tuple], budget: int) -> None:
        """Fetch these rows ahead of their rebuild (a stand-in has no read-ahead)."""

    def read_ahead_stats(self) -> dict | None:
        return None


class FamilyGroup(GroupSource):
    """A family of ours: images left pending for the batch, read-ahead, row locations and
    per-row generators."""

    @property
    def parallel_rebuild(self) -> bool:  # type: ignore[override]
        return bool(self.dataset.parallel_rebuild)

    @property
    def reads_remote(self) -> bool:  # type: ignore[override]
        return self.dataset.reads_remote()

    def samples(self, after, log, read_ahead):
        # Images stay `PendingImage`s, converted straight into the batch (media/convert.py);
        # the family reads `read_ahead` bytes ahead of the stream (0: inline).
        return self.dataset.iter_samples(after=after, log=log, pending=True, read_ahead=read_ahead)

    def sample_at(self, cursor, rng_state, log):
        return self.dataset.sample_at(cursor, rng_state=rng_state, log=log, pending=True)

    def where(self, row_key, cursor):
        return self.dataset.row_location(row_key) if row_key else super().where(row_key, cursor)

    def dropout_rng(self, data_seed, cursor, row_key):
        # Keyed by the row, as the family's own per-sample generators are: the same row gives
        # the same decision whatever the topology (an elastic restart, a rebuilt buffer).
        if row_key is None:
            return super().dropout_rng(data_seed, cursor, row_key)
        return self.dataset.sample_rng(*row_key, CFG_STREAM)

    def input_record(self):
        return self.dataset.input_record()

    def unit_count(self):
        return len(self.dataset.epoch_units)

    def row_order(self):
        return self.dataset.units.row_order()

    def set_row_order(self, order):
        self.dataset.units.resumed_open_pieces = int(order["open_pieces"])

    def cursor_problem(self, cursor):
        return cursor_problem(self.dataset, cursor)

    def reference_mismatch(self):
        return reference_mismatch(self.dataset)

    def set_epoch(self, seed):
        self.dataset.set_epoch(seed)
        # The epoch order is made here, once, so DataLoader workers inherit it rather than
        # each shuffling its own copy (families make it lazily otherwise); so are the row
        # counts of the walk by rows (families/row_plan.py), read once, not once per worker.
        self.dataset.epoch_units  # noqa: B018
        self.dataset.units.row_layout()

    def prefetch(self, cursors, budget):
        self.dataset.prefetch_rows(cursors, budget)

    def read_ahead_stats(self):
        return self.dataset.read_ahead_stats()


class DrawState:
    """The draw path's state: each group's cursor, the last row drawn (None: none yet; a
    fresh stream's start sets the reference's `data_status` positions here)."""

    def __init__(self, group_names: Sequence[str]):
        self.group_names = list(group_names)
        self.cursors: list[tuple | None] = [None] * len(self.group_names)

    def state_dict(self) -> dict:
        return {"cursors": {name: plain_cursor(cursor) for name, cursor in zip(self.group_names, self.cursors)}}

    def load_state_dict(self, saved: Mapping, worker: Mapping) -> None:
        """Load `saved`, checked: a cursor (or null) of the right form for every group."""
        cursors = saved.get("cursors")
        check_cursors(CURSORS, cursors, self.group_names)
        assert isinstance(cursors, Mapping)
        self.cursors = [tuple_cursor(cursors[name]) for name in self.group_names]


class Drawer:
    """An iteration's `draw(group)` (see the module's docstring)."""

    def __init__(
        self,
        groups: list[GroupSource],
        state: PackState,
        own: DrawState,
        config: PackingConfig,
        policy: CompatPolicy,
        data_seed: int,
        choice: GroupChoice,
    ):
        self.groups, self.state, self.own, self.config, self.data_seed = groups, state, own, config, data_seed
        self.policy, self.choice = policy, choice
        # Told of each draw only when the rule counts draws (`mix_by: samples` does not).
        self.drawn = None if type(choice).drawn is GroupChoice.drawn else choice.drawn
        self.streams = [
            group.samples(cursor, log, config.stream_read_ahead(group.reads_remote))
            for group, cursor, log in zip(groups, own.cursors, state.logs)
        ]

    def __call__(self, group: int) -> Draw:
        state, cursors = self.state, self.own.cursors
        cursor, sample = next(self.streams[group])
        while not sample["sequence_plan"]:  # a zero-length sample has no place in a pack
            cursors[group] = cursor
            where = self.groups[group].where(sample.get("row_key"), cursor)
            state.logs[group].skip(SkipReason.SAMPLE_INVALID, where, "the sample has no items (zero length)")
            cursor, sample = next(self.streams[group])
        cursors[group] = cursor
        draw = Draw(group, cursor, sample, sample.get("compat_rng_state"))
        self.decide(draw)
        if self.drawn is not None:
            self.drawn(group, draw.length)
        return draw

    def decide(self, draw: Draw) -> None:
        """Default mode: the draw's CFG dropout, decided now from the sample's own generator,
        so that every length the packer reads from here on is the one it packs
        (`packing/dropout.py`); the same decision whenever the sample is rebuilt.
        compat="bagel" draws it while packing, as the reference."""
        if not self.policy.decides_dropout_at_draw:
            return
        assert draw.sample is not None and draw.cursor is not None
        if not any_dropout(self.config):
            draw.dropped = Dropout()
            return
        rng = self.groups[draw.group].dropout_rng(self.data_seed, draw.cursor, draw.row_key)
        draw.dropped = decide_dropout(draw.sample, self.config, rng, self.policy)
