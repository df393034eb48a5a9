"""Several ranks under torchrun (gloo, CPU): disjoint shares that cover every unit, and each
rank's stream equal to building that rank alone in one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.golden import absolute_dataset_info, load_case

sys.path.insert(0, str(Path(__file__).parent / "distributed"))
from rank_stream import build, describe

COUNT = 3


@pytest.fixture(scope="module")
def config(golden_root):
    case, _, _ = load_case("packed_three_groups_flex")
    grouped = case["grouped_datasets"]
    grouped["unified_edit"]["is_mandatory"] = False
    grouped["vlm_sft"]["is_mandatory"] = False
    grouped["vlm_sft"]["weight"] = 1
    packing = {k: v for k, v in case["packing"].items()}
    return {
        "grouped_datasets": grouped,
        "dataset_info": absolute_dataset_info(case),
        "packing": packing,
        "count": COUNT,
    }


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_under_torchrun(config, tmp_path, world_size):
    (tmp_path / "config.json").write_text(json.dumps(config))
    script = Path(__file__).parent / "distributed" / "rank_stream.py"
    # The caller's path first: the ranks import the same bagel_data as this process does.
    path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(Path(__file__).parent)]))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
               str(script), str(tmp_path / "config.json"), str(tmp_path)]  # fmt: skip
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world_size)]
    assert [r["rank"] for r in records] == list(range(world_size))
    for group in config["grouped_datasets"]:
        shares = [set(r["units"][group]) for r in records]
        union = set().union(*shares)
        assert sum(len(s) for s in shares) == len(union), f"{group}: ranks share a unit"
        alone = build(config, local_rank=0, world_size=1)
        total = len(alone.grouped_datasets[alone.group_names.index(group)].epoch_units)
        assert union == set(range(total)), f"{group}: some unit is on no rank"
    for record in records:
        alone = describe(build(config, local_rank=record["rank"], world_size=world_size), COUNT)
        assert alone["packs"] == record["packs"], f"rank {record['rank']} differs from building it alone"
        assert alone["units"] == record["units"]
    # The collective listing gives every rank the same, complete list.
    assert all(r["parquet_paths"] == records[0]["parquet_paths"] for r in records)
    assert len(records[0]["parquet_paths"]) == 3 * world_size
    # Every rank gathered every rank's checkpoint; that set restarts on another world size.
    for record in records:
        assert [s["topology"]["rank"] for s in record["gathered_states"]] == list(range(world_size))
    other = 3 if world_size == 2 else 2
    merged = build(config, local_rank=0, world_size=other).load_elastic_state(records[0]["gathered_states"])
    assert merged["from_topology"] == {"world_size": world_size, "num_workers": 0}
