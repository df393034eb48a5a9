"""`DataMetrics` survives a resume (metrics.py `state_dict` / `load_state_dict`, issue 40).

The main check is a real one: a training loop's data side (tests/helpers/metrics_run.py)
runs as a process with two DataLoader workers, is killed with SIGKILL two steps after its
checkpoint, and is resumed from it; at every step, every key it logs (the wait for data
aside) equals what an uninterrupted run logs. The state's own checks follow: it is plain
data, and a wrong one is refused naming its field.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bagel_data.batch import SimpleCustomBatch
from bagel_data.errors import ResumeError
from bagel_data.metrics import STATE_VERSION, DataMetrics
from bagel_data.packing.config import PackingConfig
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.plans import TOKENS_DICT, text_sample

REPO = Path(__file__).resolve().parents[1]
STEPS, SAVE_AT, KILL_AFTER = 10, 4, 6


def run(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "helpers.metrics_run", "--out", str(out), "--steps", str(STEPS), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def logged(path: Path) -> list[dict]:
    """Each step's logged dict, the wait for data left out (it is the one figure that may differ)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{key: value for key, value in row.items() if not key.startswith("data/wait_seconds")} for row in rows]


@pytest.mark.slow  # three processes of two DataLoader workers each
def test_a_sigkilled_run_resumed_logs_what_an_uninterrupted_run_logs(tmp_path):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    whole.mkdir(), broken.mkdir()
    result = run(whole)
    assert result.returncode == 0, result.stderr[-3000:]
    killed = run(broken, "--save-at", str(SAVE_AT), "--kill-after", str(KILL_AFTER))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    before_kill = logged(broken / "run.jsonl")
    assert len(before_kill) == KILL_AFTER  # it got past the checkpoint, then died
    resumed = run(broken, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    expected = logged(whole / "run.jsonl")
    got = before_kill[:SAVE_AT] + logged(broken / "resumed.jsonl")
    assert len(expected) == len(got) == STEPS
    for step, (want, have) in enumerate(zip(expected, got), start=1):
        assert have == want, f"step {step}: " + str(
            {k: (want.get(k), have.get(k)) for k in want if want.get(k) != have.get(k)}
        )
    # What makes the comparison worth having: the resumed steps' figures reach back before
    # the checkpoint (counts since the start, skips in the T2I and the VLM group, a window across it).
    last = expected[-1]
    assert last["data/steps"] == STEPS
    assert {key for key in last if key.startswith("data/skips/") and last[key] > 0} >= {
        "data/skips/caption_not_json",
        "data/skips/json_invalid",
        "data/skips/total",
    }
    assert last["data/token_share/since_start/vlm_sft"] != last["data/token_share/vlm_sft"]


def _batches(count: int) -> list[SimpleCustomBatch]:
    """Packs of two groups of text samples (flex padding: each pack's budget is its own)."""
    config = PackingConfig(
        expected_num_tokens=90, max_num_tokens=100, max_num_tokens_per_sample=60, prefer_buffer_before=50,
        max_buffer_size=4, use_flex=True, text_cond_dropout_prob=0.0,
    )  # fmt: skip
    groups = {
        "a": FakeGroup("a", lambda i: text_sample(6 + i % 5, index=i, dataset_name="a")),
        "b": FakeGroup("b", lambda i: text_sample(20 + i % 9, index=i, dataset_name="b")),
    }
    dataset = packed_groups(groups, config, TOKENS_DICT, weights={"a": 2.0, "b": 1.0})
    return [SimpleCustomBatch([batch]) for batch in itertools.islice(iter(dataset), count)]


def _fed(count: int, window: int = 4) -> DataMetrics:
    metrics = DataMetrics(window=window, max_num_tokens=100)
    for batch in _batches(count):
        metrics.update(batch)
    return metrics


def test_the_state_is_plain_data_and_continues_the_figures(tmp_path):
    batches = _batches(9)
    whole = DataMetrics(window=4, max_num_tokens=100)
    for batch in batches:
        whole.update(batch)
    first = DataMetrics(window=4, max_num_tokens=100)
    for batch in batches[:5]:
        first.update(batch)
    torch.save(first.state_dict(), tmp_path / "metrics.pt")
    second = DataMetrics(window=4, max_num_tokens=100)
    second.load_state_dict(torch.load(tmp_path / "metrics.pt", weights_only=True))  # plain types only
    for batch in batches[5:]:
        second.update(batch)
    assert second.as_dict() == whole.as_dict()
    assert second.state_dict() == whole.state_dict()


def test_a_smaller_window_keeps_the_last_saved_steps():
    batches = _batches(6)
    saved = _fed(6, window=4).state_dict()
    narrow = DataMetrics(window=2, max_num_tokens=100)
    narrow.load_state_dict(saved)
    expected = DataMetrics(window=2, max_num_tokens=100)
    for batch in batches:
        expected.update(batch)
    assert narrow.as_dict() == expected.as_dict()


def _broken(change) -> dict:
    state = _fed(3).state_dict()
    change(state)
    return state


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda s: s.update(version=STATE_VERSION + 1), "version"),
        (lambda s: s.pop("wait_total"), "'wait_total' is missing"),
        (lambda s: s.update(steps=-1), "steps = '-1'"),
        (lambda s: s.update(steps=True), "steps = 'True'"),
        (lambda s: s["tokens"].update(a=1.5), r"tokens\['a'\]"),
        (lambda s: s.update(groups="ab"), "groups"),
        (lambda s: s["recent"][1].pop("budget"), "'budget' is missing"),
        (lambda s: s["recent"][2].update(wait=float("nan")), r"recent\[2\]\.wait"),
        (lambda s: s.update(steps=2), "recent = '3 steps' is not at most steps = 2"),
    ],
)
def test_a_wrong_state_is_refused_naming_the_field(change, named):
    metrics = DataMetrics(window=4)
    before = metrics.state_dict()
    with pytest.raises(ResumeError, match=named):
        metrics.load_state_dict(_broken(change))
    assert metrics.state_dict() == before  # nothing half loaded


def test_a_state_that_is_not_a_dict_is_refused():
    with pytest.raises(ResumeError, match="state = 'list' is not a dict"):
        DataMetrics().load_state_dict([])  # type: ignore[arg-type]
