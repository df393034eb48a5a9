"""distributed.py: explicit rank and world size win; the defaults defer to a ready process
group (faked here: the real one is exercised by the torchrun and checkpoint tests)."""

from __future__ import annotations

import pytest

from bagel_data import distributed
from bagel_data.distributed import RANK_UNSET, WORLD_UNSET, process_group_ready, resolve_topology


def test_the_unset_defaults_are_rank_0_of_1_and_show_as_numbers():
    assert RANK_UNSET == 0 and WORLD_UNSET == 1
    assert repr(RANK_UNSET) == "0" and repr(WORLD_UNSET) == "1"


def test_without_a_process_group_the_arguments_are_the_topology():
    assert not process_group_ready()
    assert resolve_topology(RANK_UNSET, WORLD_UNSET) == (0, 1)
    assert resolve_topology(3, 4) == (3, 4)


@pytest.fixture
def group_of_four(monkeypatch):
    monkeypatch.setattr(distributed.dist, "is_available", lambda: True)
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 3)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 4)


def test_in_a_process_group_only_the_unset_values_come_from_it(group_of_four):
    assert process_group_ready()
    assert resolve_topology(RANK_UNSET, WORLD_UNSET) == (3, 4)
    assert resolve_topology(1, WORLD_UNSET) == (1, 4)
    assert resolve_topology(RANK_UNSET, 2) == (3, 2)
    assert resolve_topology(0, 1) == (0, 1)  # passed explicitly, though equal to the defaults


def test_an_initialized_group_needs_distributed_available(monkeypatch):
    monkeypatch.setattr(distributed.dist, "is_available", lambda: False)
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    assert not process_group_ready()
