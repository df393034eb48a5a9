"""Per page of the docs, how many code blocks the docs test ran and skipped (and why)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TALLY: dict[str, dict] = {}


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # bagel-data
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    env["MPLBACKEND"] = "Agg"
    return env


def run_checked(command: list[str], cwd: Path, what: str) -> None:
    result = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (
        f"{what} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
