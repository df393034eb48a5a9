"""scripts/chaos_soak.py, on a short setting: a loop with read-ahead and rebuild threads on,
SIGKILLed twice after it has trained past a checkpoint, resumes to the uninterrupted run's batch sequence."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "chaos_soak.py"


def load_script():
    spec = importlib.util.spec_from_file_location("chaos_soak", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_random_sigkills_lose_and_duplicate_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))  # the loop's processes import bagel_data
    soak = load_script()
    args = soak.parse(["--root", str(tmp_path), "--steps", "9", "--every", "2", "--workers", "1",
                       "--step-seconds", "0.1", "--kills", "2", "--kill-min", "1", "--kill-max", "3",
                       "--min-steps", "3"])  # fmt: skip
    report = soak.soak(args)
    # Two kills are asked for; a loaded machine may start the loop so slowly that the last
    # start finishes its few remaining steps before the second kill may come (min-steps).
    assert 1 <= report["kills"] <= 2 and report["steps"] == 9
    assert (report["lost"], report["duplicated"], report["same_sequence"]) == (0, 0, True)


def test_the_comparison_counts_a_lost_and_a_duplicated_sample():
    soak = load_script()
    reference = {"step": 2, "digests": ["a", "b"], "samples": [[["g", "[0]"], ["g", "[1]"]], [["h", "[0]"]]]}
    repeated = {"step": 2, "digests": ["a", "c"], "samples": [[["g", "[0]"], ["g", "[1]"]], [["g", "[1]"]]]}
    assert soak.compare(reference, reference) == {"steps": 2, "lost": 0, "duplicated": 0, "same_sequence": True}
    assert soak.compare(reference, repeated) == {"steps": 2, "lost": 1, "duplicated": 1, "same_sequence": False}
