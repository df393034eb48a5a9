"""Merging the checkpoints of every old worker into one elastic-restart checkpoint.

`merge_worker_states` turns the per-worker checkpoints of a W x K run into one dict that any
W' x K' pipeline loads (`PackedDataset.load_elastic_state`); each new worker derives its own
share from it. What is guaranteed is written in `bagel_data.checkpoint.restart` and docs/elastic.md.
"""

from __future__ import annotations

import collections

from .checks import CURSORS, check_cursors, check_shape, check_waiting
from .orders import follow_orders
from .restart import GroupRestart, check_complete, group_plan
from .state import DRAW, OVERFLOW, READABLE_VERSIONS, ResumeError, check_compatible, upgrade

ELASTIC_KIND = "elastic"


def is_elastic(saved: dict) -> bool:
    return saved.get("kind") == ELASTIC_KIND


def merge_worker_states(packed, worker_states: list[dict]) -> dict:  # packed: a StreamSetup (stream.py)
    """One elastic checkpoint from the checkpoints of all workers of all old ranks."""
    if not worker_states:
        raise ResumeError("an elastic restart needs the checkpoints of the old workers; none were given")
    if any(isinstance(saved, dict) and is_elastic(saved) for saved in worker_states):
        raise ResumeError("merge the checkpoints taken by the workers, not an elastic checkpoint")
    # Each in this version's layout (the stages' parts under `stages`), checked as a resume
    # checks it: the plan reads every worker's cursors, buffer and carry there.
    worker_states = [_readable(saved, packed.group_names) for saved in worker_states]
    for saved in worker_states:
        check_compatible(
            saved,
            packed.data_seed,
            packed.group_names,
            packed.group_unit_counts(),
            packed.group_inputs(),
            packed.tokenizer,
        )
    try:
        world_size, num_workers = check_complete([saved["topology"] for saved in worker_states])
    except ValueError as exc:  # a plain ValueError from older code paths
        raise ResumeError(str(exc)) from None
    ordered = sorted(worker_states, key=lambda saved: (saved["topology"]["rank"], saved["topology"]["worker_id"]))
    # The old workers' cursors name rows in the order they were taken in.
    follow_orders(packed.groups, ordered[0])
    restarts = [saved["restart"] for saved in ordered]
    generations = {0 if restart is None else restart["generation"] for restart in restarts}
    if len(generations) != 1:
        raise ResumeError(f"the checkpoints come from different restarts (generations {sorted(generations)})")
    groups = {}
    for name, dataset in zip(packed.group_names, packed.grouped_datasets):
        old = [None if restart is None else GroupRestart.from_dict(restart["groups"][name]) for restart in restarts]
        groups[name] = group_plan(dataset, name, ordered, old).to_dict()
    return {
        "version": ordered[0]["version"],
        "kind": ELASTIC_KIND,
        "data_seed": packed.data_seed,
        "units": ordered[0]["units"],
        "inputs": ordered[0].get("inputs"),
        "tokenizer": ordered[0].get("tokenizer"),
        "orders": ordered[0].get("orders"),
        "from_topology": {"world_size": world_size, "num_workers": num_workers},
        "restart": {"generation": generations.pop() + 1, "groups": groups},
        "history": _totals(ordered),
    }


def _readable(saved, group_names: list[str]) -> dict:
    """A worker's checkpoint upgraded to this version, its fields and the parts of the
    stages the merge reads checked."""
    if not isinstance(saved, dict):
        raise ResumeError(f"a worker's checkpoint is a dict (PackedDataset.state_dict()), not {type(saved).__name__}")
    saved = upgrade(saved)
    if saved.get("version") not in READABLE_VERSIONS:
        return saved  # check_compatible names the version
    check_shape(saved, group_names)
    stages = saved["stages"]
    check_cursors(CURSORS, (stages.get(DRAW) or {}).get("cursors"), group_names)
    waiting = stages.get(OVERFLOW) or {}
    check_waiting(f"stages.{OVERFLOW}", waiting.get("buffer"), waiting.get("carry"), group_names)
    return saved


def _totals(states: list[dict]) -> dict:
    """Packs, tokens, samples and skips of all old workers, added to the older history."""
    packs = tokens = 0
    samples: collections.Counter = collections.Counter()
    skips: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    # Workers that ran after the same restart share one history: count it once.
    for part in [states[0]["history"] or {}, *states]:
        packs += part.get("packs", 0)
        tokens += part.get("tokens", 0)
        samples.update(part.get("samples", {}))
        for group, counts in part.get("skips", {}).items():
            skips[group].update(counts)
    # The step each rank reached: where a mixture schedule goes on (packing/schedule.py).
    # A rank's loader takes one pack per step from its workers in turn, so its step count
    # is its workers' packs since the last restart, after the steps before that.
    per_rank: collections.Counter = collections.Counter()
    for state in states:
        per_rank[state["topology"]["rank"]] += state.get("packs", 0)
    steps = int((states[0]["history"] or {}).get("steps", 0)) + max(per_rank.values(), default=0)
    return {
        "packs": packs,
        "tokens": tokens,
        "samples": dict(samples),
        "skips": {g: dict(c) for g, c in skips.items()},
        "steps": steps,
    }


def apply_restart(packed, restart: dict | None) -> None:
    """Give every group its restart plan, or none, through the group's own interface
    (`GroupSource.set_restart_plan`). The plan's unit ids fit the data because
    `check_compatible` compared the unit counts first."""
    for group in packed.groups:
        group.set_restart_plan(None if restart is None else GroupRestart.from_dict(restart["groups"][group.name]))
