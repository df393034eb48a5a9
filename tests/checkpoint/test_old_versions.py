"""Checkpoints written by earlier versions of the library (2 to 5, kept in `fixtures/`,
each written by the code of its version with the packs that code made next) load, and
continue as that code did. Version 5 moved the group choice's and the pacer's fields under
`stages`, version 6 the draw path's cursors and the overflow's buffer and carry."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

from bagel_data.checkpoint.state import STATE_VERSION, upgrade
from bagel_data.packing.config import PackingConfig
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.golden import as_worker
from helpers.plans import TOKENS_DICT, text_sample
from helpers.resume import check_save_load_at, rows

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packing"))  # the schedule of test_pacing.py
FIXTURES = Path(__file__).resolve().parent / "fixtures"
CASES = [(version, case) for version in (2, 3, 4, 5) for case in ("greedy", "best_fit")]
CASES += [(4, "mid_drain"), (5, "mid_drain")]


def _fixture(version: int) -> dict:
    saved = json.loads((FIXTURES / f"state_v{version}.json").read_text())
    assert saved["version"] == version
    return saved["checkpoints"]


def _groups() -> dict:
    return {
        n: FakeGroup(n, lambda i, n=n, k=k: text_sample(10 + (i * 37 + k * 11) % 60, index=i, dataset_name=n))
        for k, n in enumerate("ab")
    }


def _two_groups(strategy: str):
    config = PackingConfig(
        expected_num_tokens=90,
        max_num_tokens=100,
        max_num_tokens_per_sample=80,
        prefer_buffer_before=40,
        max_buffer_size=4,
        use_flex=True,
        mix_by="tokens",
        pack_strategy=strategy,
    )
    return packed_groups(_groups(), config, TOKENS_DICT, weights={"a": 2.0, "b": 1.0})


def _mid_drain():
    from test_pacing import _dataset

    return _dataset("best_fit", 1, 1)[0]


@pytest.mark.parametrize(("version", "case"), CASES)
def test_an_old_checkpoint_continues_as_its_own_version_did(version, case):
    checkpoint = _fixture(version)[case]
    assert checkpoint["state"]["version"] == version
    with as_worker(1, 2) if case == "mid_drain" else as_worker(None, 0):
        dataset = _mid_drain() if case == "mid_drain" else _two_groups(case)
        dataset.load_state_dict(checkpoint["state"])
        got = [rows(batch) for batch in itertools.islice(iter(dataset), len(checkpoint["next"]))]
        assert got == checkpoint["next"]
        assert dataset.state_dict()["version"] == STATE_VERSION


def test_upgrade_moves_a_stages_fields_under_its_key():
    old = _fixture(4)["mid_drain"]["state"]
    new = upgrade(old)
    moved = {"group_tokens", "backlog", "packed_tokens", "cursors", "buffer", "carry"}
    assert new["version"] == STATE_VERSION and not moved & set(new)
    assert new["stages"] == {
        "choose": {"group_tokens": old["group_tokens"]},
        "pace": {"backlog": old["backlog"], "packed_tokens": old["packed_tokens"]},
        "draw": {"cursors": old["cursors"]},
        "overflow": {"buffer": old["buffer"], "carry": old["carry"]},
    }
    assert old["backlog"] > 0 and "backlog" in old  # the input is left as it was
    three = upgrade(_fixture(3)["greedy"]["state"])
    assert set(three["stages"]) == {"choose", "draw", "overflow"}, "version 3 had no pacer's state"


def test_upgrade_of_version_5_keeps_its_stages_and_adds_the_draw_paths_and_the_overflows():
    old = _fixture(5)["greedy"]["state"]
    assert old["carry"] is not None, "the fixture should carry a sample"
    new = upgrade(old)
    assert new["version"] == STATE_VERSION and not {"cursors", "buffer", "carry"} & set(new)
    assert new["stages"] == {
        **old["stages"],
        "draw": {"cursors": old["cursors"]},
        "overflow": {"buffer": old["buffer"], "carry": old["carry"]},
    }
    assert set(old["stages"]) == {"choose", "pace"}  # the input's stages are left as they were
    assert upgrade(new) == new  # this version's is taken as it is


@pytest.mark.parametrize("strategy", ["greedy", "best_fit"])
def test_todays_checkpoints_resume_at_several_midpoints(strategy):
    taken = check_save_load_at(lambda: _two_groups(strategy), cuts=[1, 3, 7], total=14)
    assert all(list(state["stages"]) == ["draw", "overflow", "choose", "pace"] for state in taken)
    assert all(not {"cursors", "buffer", "carry"} & set(state) for state in taken)
    assert any(state["stages"]["overflow"]["buffer"] for state in taken), "no cut held a buffered sample"
