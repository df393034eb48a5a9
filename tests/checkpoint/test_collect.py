"""checkpoint/collect.py: the dataset checkpoints inside a StatefulDataLoader state, and
their gathering over ranks (a process group faked here; tests/checkpoint/distributed runs a
real one)."""

from __future__ import annotations

import pytest

from bagel_data.checkpoint import collect
from bagel_data.checkpoint.collect import gather_worker_states, worker_dataset_states


def test_without_workers_the_state_is_the_main_process_dataset_state():
    assert worker_dataset_states({"dataset_state": {"a": 1}}) == [{"a": 1}]
    assert worker_dataset_states({"dataset_state": None}) == []
    assert worker_dataset_states({}) == []


def test_worker_states_come_in_worker_order_and_skip_workers_without_one():
    state = {
        "_snapshot": {
            "_worker_snapshots": {
                "worker_1": {"dataset_state": {"w": 1}},
                "worker_0": {"dataset_state": {"w": 0}},
                "worker_2": {"fetcher_state": {}},  # no dataset state (yet)
                "worker_3": {"dataset_state": None},
            }
        },
        "dataset_state": {"main": True},  # ignored when workers hold the state
    }
    assert worker_dataset_states(state) == [{"w": 0}, {"w": 1}]


def test_outside_a_process_group_the_states_come_back_as_a_new_list():
    states = [{"w": 0}]
    gathered = gather_worker_states(states)
    assert gathered == states and gathered is not states


def _fake_group(monkeypatch, world_size: int) -> list:
    calls = []

    def all_gather_object(out, mine):
        calls.append(len(out))
        for rank in range(len(out)):
            out[rank] = [{"rank": rank, "w": w["w"]} for w in mine]

    monkeypatch.setattr(collect, "process_group_ready", lambda: True)
    monkeypatch.setattr(collect.dist, "get_world_size", lambda: world_size)
    monkeypatch.setattr(collect.dist, "all_gather_object", all_gather_object)
    return calls


def test_one_rank_in_a_group_gathers_nothing(monkeypatch):
    calls = _fake_group(monkeypatch, 1)
    assert gather_worker_states([{"w": 0}, {"w": 1}]) == [{"w": 0}, {"w": 1}] and calls == []


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_ranks_states_are_gathered_in_rank_order(monkeypatch, world_size):
    calls = _fake_group(monkeypatch, world_size)
    gathered = gather_worker_states([{"w": 0}, {"w": 1}])
    assert calls == [world_size]
    assert gathered == [{"rank": r, "w": w} for r in range(world_size) for w in (0, 1)]
