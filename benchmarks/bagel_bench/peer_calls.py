"""How the benchmark reaches the peers: their own Python (a virtual environment of its
own, `--peers-python` or `BAGEL_PEERS_PYTHON`) running `peer_runner.py`, one JSON answer
per command; without it the peers are skipped with the install line."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

INSTALL = (
    "not installed: python3.11 -m venv PEERS && PEERS/bin/pip install torch==2.13.0 && "
    "PEERS/bin/pip install megatron-energon mosaicml-streaming, then --peers-python PEERS/bin/python"
)
RUNNER = Path(__file__).with_name("peer_runner.py")


def find_peers(given: str | None) -> tuple[str | None, dict]:
    """The peers' Python and their versions, or None and why they are skipped."""
    python = given or os.environ.get("BAGEL_PEERS_PYTHON")
    if not python:
        return None, {"skipped": INSTALL}
    try:
        found = peer(python, "versions", timeout=120)
    except RuntimeError as error:
        return None, {"skipped": f"{INSTALL} ({error})"}
    missing = [name for name in ("megatron-energon", "mosaicml-streaming") if not found.get(name)]
    if missing:
        return None, {"skipped": f"{INSTALL} (missing there: {', '.join(missing)})", "versions": found}
    return python, {"versions": found}


def peer(python: str, *args: str, timeout: float = 900) -> dict:
    """One `peer_runner.py` command's JSON answer."""
    try:
        done = subprocess.run(
            [python, str(RUNNER), *args], capture_output=True, text=True, timeout=timeout, env=_quiet_env()
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RuntimeError(f"{Path(python).name} {args[0]}: {error}") from error
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return json.loads(lines[-1])


def _quiet_env() -> dict:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONWARNINGS"] = "ignore"
    return env
