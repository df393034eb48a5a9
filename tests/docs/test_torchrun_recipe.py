"""The README's torchrun recipe runs as written: two ranks (gloo, CPU) on the demo data draw
batches and save their loader and metrics states, and the restarted job draws the same
batches again and logs the same metrics."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def recipe() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### A torchrun recipe", 1)[1]
    block = re.search(r"^```bash\n(.*?)^```$", section, re.S | re.M)
    assert block is not None
    return block.group(1)


def run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # torchrun
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run(["bash", "-e", "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # two torchrun launches of two ranks each
def test_the_torchrun_recipe_checkpoints_and_resumes(tmp_path, demo_root):
    code = recipe()
    assert code.count("torchrun --standalone --nproc-per-node 2 examples/torchrun_demo.py") == 2
    (tmp_path / "examples").symlink_to(REPO / "examples")  # the repository root, as the README says
    shutil.copytree(demo_root, tmp_path / "demo_data")  # the session's demo dataset: written once
    result = run(code, tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank}: resumed, 3 batches equal the first run's" in result.stdout
        assert f"rank {rank}: resumed metrics equal the first run's" in result.stdout
        assert len(json.loads((tmp_path / "ckpt" / f"metrics_rank{rank}.json").read_text())) == 3
        assert (tmp_path / "ckpt" / f"loader_rank{rank}.pt").is_file()
        assert len(json.loads((tmp_path / "ckpt" / f"batches_rank{rank}.json").read_text())) == 3
    # Each check can fail, one launch for both (a launch costs two ranks importing torch): rank 1
    # is given a first run's batches that are not what its state resumes to, rank 0 a first
    # run's metrics log that counts from another start; each rank's other check still passes.
    expected = tmp_path / "ckpt" / "batches_rank1.json"
    batches = json.loads(expected.read_text())
    expected.write_text(json.dumps(batches[1:] + batches[:1]))
    logged_path = tmp_path / "ckpt" / "metrics_rank0.json"
    logged = json.loads(logged_path.read_text())
    logged[0]["data/steps"] += 1
    logged_path.write_text(json.dumps(logged))
    resumed = run(code.splitlines()[-1], tmp_path)
    assert resumed.returncode != 0, resumed.stdout
    assert "rank 1: resumed, 3 batches DIFFER" in resumed.stdout and "rank 1: resumed metrics equal" in resumed.stdout
    assert "rank 0: resumed metrics DIFFER" in resumed.stdout and "rank 0: resumed, 3 batches equal" in resumed.stdout
