"""Where a packing worker's stream starts: fresh, from its own checkpoint, from a NeMo
AutoModel checkpoint, or from an elastic-restart plan; and the Stateful protocol
(`state_dict` / `load_state_dict`) that torchdata's StatefulDataLoader calls.

`PackedDataset` inherits this; the checkpoint's contents are `checkpoint/state.py`.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..checkpoint.checks import check_cursor_ranges, check_shape, shown
from ..checkpoint.foreign import is_nemo_state, load_nemo_state
from ..checkpoint.merge import apply_restart, is_elastic, merge_worker_states
from ..checkpoint.state import STATE_VERSION, PackState, ResumeError, check_compatible
from ..compat import CompatPolicy
from ..errors import SkipLog
from ..sharding import WorkerTopology
from .rebuild import rebuild_ahead, rebuild_threads

_GLOBAL_SEED_TAG = 0x6105


class StreamState:
    """The state half of `PackedDataset` (which sets these attributes)."""

    grouped_datasets: list[Any]
    group_names: list[str]
    local_rank: int
    world_size: int
    data_seed: int
    global_seed: int | None
    policy: CompatPolicy
    _live: PackState | None
    _resume: dict | None
    config: Any  # PackingConfig

    def _topology(self) -> WorkerTopology:
        return WorkerTopology.current(self.local_rank, self.world_size)

    def _fresh_state(self, generation: int = 0) -> PackState:
        topology = self._topology()
        key = [self.data_seed & 0xFFFFFFFF, topology.rank, topology.worker_id, 0x9ACC]
        key += [generation] if generation else []  # each elastic restart draws afresh
        if self.global_seed is not None:  # a distinct tail: cannot collide with a generation
            key += [_GLOBAL_SEED_TAG, self.global_seed & 0xFFFFFFFF, (self.global_seed >> 32) & 0xFFFFFFFF]
        logs = [
            SkipLog(name, dataset.strict, dataset.max_consecutive_failures)
            for name, dataset in zip(self.group_names, self.grouped_datasets)
        ]
        # Without a checkpoint, each group starts where the reference's data_status says.
        cursors = [dataset.resume_cursor(topology.worker_id) for dataset in self.grouped_datasets]
        if self.policy.reference:  # one stream for the packer and every group, as the reference's globals
            rng: Any = self.policy.start_stream(self.data_seed)
        else:
            rng = np.random.default_rng(np.random.SeedSequence(key))
        state = PackState(topology, self.data_seed, self.group_unit_counts(), rng, cursors, collections.deque(), logs)
        state.inputs = self.group_inputs()
        return state

    def group_inputs(self) -> list[dict | None]:
        """Each group's input files and sizes, as a checkpoint records them (checkpoint/inputs.py)."""
        # A group that is not one of the families (a test double, a user's own) records none.
        return [getattr(dataset, "input_record", lambda: None)() for dataset in self.grouped_datasets]

    def group_unit_counts(self) -> list[int]:
        """How many units (files, row groups or lines) each group shards."""
        return [len(getattr(dataset, "epoch_units", ())) for dataset in self.grouped_datasets]

    def state_dict(self) -> dict:
        """Checkpoint of this worker's stream (torchdata's Stateful protocol)."""
        if self._live is not None:
            return self._live.to_dict(self.group_names)
        if self._resume is not None and is_elastic(self._resume):
            # Before its first batch under a restart plan: the worker's own starting state,
            # which a later elastic restart can merge like any other worker's.
            return self._elastic_start(self._resume).to_dict(self.group_names)
        if self._resume is not None:
            return dict(self._resume)
        return self._fresh_state().to_dict(self.group_names)

    def load_state_dict(self, state_dict: dict) -> None:
        """Continue from a checkpoint on the next `iter()`; checked against the topology then.

        An elastic checkpoint (from `load_elastic_state`) loads into any topology.
        """
        self._resume = state_dict

    def load_elastic_state(self, worker_states: list[dict]) -> dict:
        """Continue the checkpoints of *all* workers of all ranks of a run with another world
        size or worker count; returns the merged checkpoint (the same on every new rank).

        Not available with `compat="bagel"` (the reference has no such restart).
        Call it before building the loader, with the dataset states of every old worker
        (`bagel_data.loader.worker_dataset_states` of each rank's loader state); see
        docs/elastic.md.
        """
        if self.policy.reference:
            raise ResumeError(
                'compat="bagel" resumes only in the same topology (load_state_dict) or from the '
                "reference's data_status; an elastic restart would change which rows are read"
            )
        self._resume = merge_worker_states(self, worker_states)  # checked here, not in a worker
        return self._resume

    def _start_state(self) -> PackState:
        """The state the next iteration starts from: fresh, a checkpoint, or a restart plan."""
        saved, self._resume = self._resume, None
        if saved is None:
            apply_restart(self, None)
            return self._fresh_state()
        if is_nemo_state(saved):  # written by NeMo AutoModel's PackedDataset
            apply_restart(self, None)
            state = self._fresh_state()
            load_nemo_state(state, saved, self.group_names)
            return state
        if not isinstance(saved, Mapping):
            raise ResumeError(f"a checkpoint is a dict (PackedDataset.state_dict()), not {shown(saved, 80)}")
        if not is_elastic(saved):
            state = self._fresh_state()
            self._restore_checked(state, saved)
            return state
        return self._elastic_start(saved)

    def _restore_checked(self, state: PackState, saved: Mapping) -> None:
        """Restore `saved` into `state` after checking every field it reads; whatever is
        still wrong is a ResumeError, never a bare KeyError deep in a worker."""
        if saved.get("version") == STATE_VERSION:  # any other version gets its own message below
            check_shape(saved, self.group_names, max(self.config.max_buffer_size, 1))
        try:
            state.restore(dict(saved), self.group_names)
            apply_restart(self, state.restart)
        except ResumeError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise ResumeError(f"malformed checkpoint ({type(exc).__name__}: {shown(str(exc))})") from None
        waiting = [(f"buffer[{i}]", item.group, item.cursor) for i, item in enumerate(state.buffer)]
        if state.carry is not None:
            waiting.append(("carry", state.carry.group, state.carry.cursor))
        check_cursor_ranges(self.grouped_datasets, self.group_names, state.cursors, waiting)

    def _elastic_start(self, saved: dict) -> PackState:
        check_compatible(saved, self.data_seed, self.group_names, self.group_unit_counts(), self.group_inputs())
        apply_restart(self, saved["restart"])
        state = self._fresh_state(saved["restart"]["generation"])
        state.cursors = [None] * len(self.group_names)  # each group starts with its inherited samples
        state.restart, state.history = saved["restart"], saved["history"]
        return state

    def _prefetch_restored(self, state: PackState) -> Callable[[], None]:
        """Fetch the rows of the samples a checkpoint buffered (and carried) at once, grouped
        by file, through each family's read-ahead, and rebuild them from these reads on a
        few threads (`packing/rebuild.py`, `rebuild_threads`); with `read_ahead_bytes: 0` both
        stay inline.
        Returns what stops the rebuild when the stream closes."""
        restored = [*state.buffer, *([state.carry] if state.carry is not None else [])]
        waiting: dict[int, list[tuple]] = {}
        for item in restored:
            if item.sample is None:
                waiting.setdefault(item.group, []).append(item.cursor)
        for group, cursors in waiting.items():
            prefetch = getattr(self.grouped_datasets[group], "prefetch_rows", None)
            if prefetch is not None:  # a family of ours (a user's group may have no read-ahead)
                prefetch(cursors, self.config.read_ahead_bytes)
        # compat="bagel" rebuilds a row by replaying the one stream all groups share: in order.
        threads = self.config.rebuild_threads
        if waiting and self.config.read_ahead_bytes > 0 and not self.policy.reference:
            return rebuild_ahead(restored, self.grouped_datasets, rebuild_threads() if threads is None else threads)
        return lambda: None

    @property
    def stats(self) -> dict:
        """Packs, tokens and samples emitted, and rows skipped by reason, in this process."""
        state = self._live
        if state is None:
            return {"packs": 0, "tokens": 0, "samples": {}, "skips": {}, "history": None, "read_ahead": {}}
        return {
            "packs": state.packs,
            "tokens": state.tokens,
            "samples": dict(state.samples),
            "skips": {name: log.as_dict() for name, log in zip(self.group_names, state.logs)},
            "history": state.history,  # totals before the last elastic restart, if any
            "read_ahead": self._read_ahead_stats(),
        }

    def _read_ahead_stats(self) -> dict:
        """Per group, what its read-ahead holds and did (`ReadAhead.stats`), if it has one."""
        found = {}
        for name, dataset in zip(self.group_names, self.grouped_datasets):
            stats = getattr(dataset, "read_ahead_stats", lambda: None)()
            if stats is not None:
                found[name] = stats
        return found
