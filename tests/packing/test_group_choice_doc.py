"""docs/extending.md section 5 works as written: a stateful group-choice rule in one file,
registered, packs by its rule, saves its state under `stages.choose`, and resumes exactly."""

from __future__ import annotations

import collections
import itertools
import re
import runpy
from pathlib import Path

import pytest

from bagel_data import ConfigError, ResumeError
from bagel_data.packing import choosers
from bagel_data.packing.config import PackingConfig
from bagel_data.schema import settings
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.plans import TOKENS_DICT, text_sample

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
WEIGHTS = {"a": 3.0, "b": 1.0, "c": 1.0}


def _block(name: str) -> str:
    match = re.search(rf"<!-- {re.escape(name)} -->\n```\w+\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert match, f"docs/extending.md has no block for {name}"
    return match.group(1)


@pytest.fixture
def draws_rule(tmp_path, monkeypatch):
    """The doc's file, written out and run (it registers `mix_by: draws`; undone after)."""
    monkeypatch.setattr(choosers, "GROUP_CHOICES", dict(choosers.GROUP_CHOICES))
    monkeypatch.setattr(settings, "MIX_BY", settings.MIX_BY)  # the same list, restored below
    before = list(settings.MIX_BY)
    (tmp_path / "draw_counts.py").write_text(_block("draw_counts.py"), encoding="utf-8")
    module = runpy.run_path(str(tmp_path / "draw_counts.py"))
    yield module["DrawCounts"]
    settings.MIX_BY[:] = before


def _config(**changes) -> PackingConfig:
    base = dict(
        expected_num_tokens=180,
        max_num_tokens=200,
        max_num_tokens_per_sample=120,
        prefer_buffer_before=100,
        max_buffer_size=4,
        text_cond_dropout_prob=0.0,
        vit_cond_dropout_prob=0.0,
        vae_cond_dropout_prob=0.0,
        mix_by="draws",
    )
    return PackingConfig(**{**base, **changes})


def _dataset(**changes):
    groups = {
        name: FakeGroup(name, lambda i, n=name, k=k: text_sample(20 + (i * 7 + k * 13) % 50, index=i, dataset_name=n))
        for k, name in enumerate(WEIGHTS)
    }
    return packed_groups(groups, _config(**changes), TOKENS_DICT, weights=WEIGHTS), groups


def _rows(batch) -> list:
    return [(where["dataset_name"], where["data_indexes"]) for where in batch["batch_data_indexes"]]


def test_the_rule_draws_each_group_its_share_of_samples(draws_rule):
    dataset, groups = _dataset()
    list(itertools.islice(iter(dataset), 20))
    drawn = {name: len(group.drawn) for name, group in groups.items()}
    total = sum(drawn.values())
    for name, weight in WEIGHTS.items():  # deterministic: within one draw of the share
        assert abs(drawn[name] - weight / sum(WEIGHTS.values()) * total) <= 1, drawn
    state = dataset.state_dict()
    assert state["stages"]["choose"] == {"draws": drawn}  # its own state, under its key


@pytest.mark.parametrize("cut", [1, 4, 9])
def test_a_resume_continues_the_rule_exactly(draws_rule, cut):
    full = [_rows(b) for b in itertools.islice(iter(_dataset()[0]), 16)]
    first, _ = _dataset()
    head = [_rows(b) for b in itertools.islice(iter(first), cut)]
    resumed, _ = _dataset()
    resumed.load_state_dict(first.state_dict())
    assert head + [_rows(b) for b in itertools.islice(iter(resumed), 16 - cut)] == full


def test_the_rule_s_own_check_refuses_a_tampered_state(draws_rule):
    first, _ = _dataset()
    list(itertools.islice(iter(first), 3))
    state = first.state_dict()
    state["stages"]["choose"]["draws"]["d"] = 4
    resumed, _ = _dataset()
    resumed.load_state_dict(state)
    with pytest.raises(ResumeError, match=r"stages.choose.draws names unknown group\(s\) \['d'\]"):
        next(iter(resumed))


def test_a_rule_is_unknown_until_registered():
    with pytest.raises(ConfigError, match="mix_by"):
        _config(mix_by="draws_unregistered")
    assert collections.Counter(settings.MIX_BY)["draws_unregistered"] == 0
