"""The faster floor (uint8 + `resize_backend: torch` + `fast_decode`) of this tree against
the same of a git revision, interleaved in one run: packed tokens per CPU second, medians.

Each round runs one child per side (baseline first, then this tree), each drawing one
warm-up pack and timing the next `--batches` of the run config, on one thread. The
baseline's `src/` is exported from `--base` (`git archive`) into a temporary folder, so the
working tree is not touched; both sides use this tree's `benchmarks/` and `scripts/`.

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python scripts/floor_ab.py --base HEAD~1 \
        --config benchmarks/bagel_run.yaml --rounds 5 --batches 10 --out benchmarks/floor_ab.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child(config: str, batches: int) -> dict:
    """One side's measurement, in this process (run as `--child`)."""
    import dataclasses

    import torch

    sys.path.insert(0, str(REPO / "scripts"))
    from reference_bench import time_packs

    from bagel_bench.approximate import approximate_grouped
    from bagel_bench.runs import load_tokenizer_once
    from bagel_data.batch import collate_wrapper
    from bagel_data.tools.run import build_from_run_config, load_run_config

    torch.set_num_threads(1)
    run = load_run_config(config)
    grouped = approximate_grouped(run.grouped_datasets)
    run = dataclasses.replace(run, grouped_datasets=grouped, packing={**run.packing, "pixel_format": "uint8"})
    tokenizer, _ = load_tokenizer_once()
    dataset = build_from_run_config(run, rank=0, world_size=1, num_workers=1, tokenizer=tokenizer).dataset
    timed = time_packs(dataset, collate_wrapper(), batches, 1)
    return {key: timed[key] for key in ("tokens", "cpu_seconds", "wall_seconds", "tokens_per_cpu_second")}


def run_side(src: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{REPO / 'benchmarks'}", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--child", "--config", args.config, "--batches", str(args.batches)]
    out = subprocess.run(command, env=env, cwd=REPO, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="git revision of the baseline's src/")
    parser.add_argument("--config", default="benchmarks/bagel_run.yaml")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.config, args.batches)))
        return
    with tempfile.TemporaryDirectory() as base_dir:
        archive = subprocess.run(["git", "archive", args.base, "src"], cwd=REPO, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", base_dir], input=archive.stdout, check=True)
        rounds = [{"base": run_side(Path(base_dir) / "src", args), "new": run_side(REPO / "src", args)}
                  for _ in range(args.rounds)]  # fmt: skip
    ratios = [r["new"]["tokens_per_cpu_second"] / r["base"]["tokens_per_cpu_second"] for r in rounds]
    summary = {
        "base": args.base, "config": args.config, "batches": args.batches, "rounds": rounds,
        "same_tokens": all(r["base"]["tokens"] == r["new"]["tokens"] for r in rounds),
        "base_tokens_per_cpu_second_median": statistics.median(r["base"]["tokens_per_cpu_second"] for r in rounds),
        "new_tokens_per_cpu_second_median": statistics.median(r["new"]["tokens_per_cpu_second"] for r in rounds),
        "ratio_median": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)],
    }  # fmt: skip
    print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
