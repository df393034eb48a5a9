"""Rows/s of `prepare t2i` on the local engine and on Ray with 1 and 2 CPUs (not a test).

    PYTHONPATH=src python scripts/bench_prepare_engines.py --images 3000 --rounds 3

Generates `--images` JPEGs with captions, then runs each configuration in a fresh process,
the configurations interleaved round by round (the machine may be shared: take the best of
the rounds). Peak memory is the largest sum of RSS over the process and all its
descendants (Ray's raylet, GCS and workers included), sampled every 50 ms from /proc by the
parent process.
Ray's fixed cost is `ray.init`, the first job (2 shards of 8 images: workers and Ray Data
start) and `ray.shutdown`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CONFIGS = {"local": ("local", None), "ray-1cpu": ("ray", 1), "ray-2cpu": ("ray", 2)}


def generate(root: Path, count: int, width: int, height: int) -> None:
    from bagel_data.synthetic.images import encode_image, photo_like_image

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for index in range(count):
        (root / f"{index:06d}.jpg").write_bytes(encode_image(photo_like_image(rng, width, height), "JPEG"))
        (root / f"{index:06d}.txt").write_text(f"a generated photo number {index}\n")


def _tree_rss(pid: int) -> int:
    """Bytes of RSS of `pid` and every descendant."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += rss.get(current, 0)
        todo += children.get(current, [])
    return total


def _measured(command: list[str]) -> dict:
    """Run one configuration in a child process, sampling the RSS of its process tree from
    here (a sampling thread inside the child would take the GIL from the local engine)."""
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL, text=True)
        peak = 0
        while child.poll() is None:
            peak = max(peak, _tree_rss(child.pid))
            time.sleep(0.05)
        if child.returncode:
            raise SystemExit(f"{command} failed with exit code {child.returncode}")
        out.seek(0)
        result = json.loads(out.read().strip().splitlines()[-1])
    result["peak_rss_mb"] = peak / 2**20
    return result


def run_one(config: str, raw: Path, out: Path, shard: int, max_side: int) -> dict:
    """One configuration in this process: times and the peak memory of the process tree."""
    from bagel_data.tools.prepare.sharded import prepare_sharded

    engine, cpus = CONFIGS[config]
    result: dict = {"config": config}
    if engine == "ray":
        import ray

        start = time.perf_counter()
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        result["ray_init_s"] = time.perf_counter() - start
        # The first job on a fresh cluster starts the workers and Ray Data: a fixed cost too.
        start = time.perf_counter()
        tiny_raw = out.parent / "tiny_raw"
        if not tiny_raw.exists():
            tiny_raw.mkdir()
            for path in sorted(raw.iterdir())[:16]:
                shutil.copy(path, tiny_raw / path.name)
        prepare_sharded("t2i", tiny_raw, out.parent / "tiny", engine="ray", rows_per_shard=8, overwrite=True)
        result["ray_first_job_s"] = time.perf_counter() - start
    start = time.perf_counter()
    report = prepare_sharded(
        "t2i", raw, out, engine=engine, rows_per_shard=shard, max_side=max_side, reencode="JPEG", overwrite=True
    )
    result["convert_s"] = time.perf_counter() - start
    if engine == "ray":
        start = time.perf_counter()
        ray.shutdown()
        result["ray_shutdown_s"] = time.perf_counter() - start
    fixed = sum(result.get(key, 0) for key in ("ray_init_s", "ray_first_job_s", "ray_shutdown_s"))
    result["end_to_end_rows_per_s"] = report.rows_written / (result["convert_s"] + fixed)
    result["rows"] = report.rows_written
    result["rows_per_s"] = report.rows_written / result["convert_s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows-per-shard", type=int, default=250)
    parser.add_argument("--max-side", type=int, default=128, help="rows are downscaled to this and re-encoded")
    parser.add_argument("--size", default="384x256", help="generated images, WIDTHxHEIGHT")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one configuration
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    if args.one:
        raw = args.work / "raw"
        print(json.dumps(run_one(args.one, raw, args.work / args.one, args.rows_per_shard, args.max_side)))
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_prepare_"))
    if not (work / "raw").exists():
        generate(work / "raw", args.images, *map(int, args.size.split("x")))
    results: dict[str, list[dict]] = {}
    for round_ in range(args.rounds):
        for config in args.configs.split(","):
            command = [sys.executable, __file__, "--one", config, "--work", str(work),
                       "--rows-per-shard", str(args.rows_per_shard), "--max-side", str(args.max_side)]  # fmt: skip
            result = _measured(command)
            results.setdefault(config, []).append(result)
            print(f"round {round_}: {json.dumps(result)}", flush=True)
    print("\nbest of", args.rounds, "rounds (rows/s on a started cluster; end to end: with Ray's fixed costs):")
    for config, runs in results.items():
        best = max(runs, key=lambda run: run["rows_per_s"])
        extra = {k: round(min(run[k] for run in runs), 2) for k in best if k.startswith("ray_")}
        e2e = max(run["end_to_end_rows_per_s"] for run in runs)
        print(f"  {config:9s} {best['rows_per_s']:7.1f} rows/s  end to end {e2e:7.1f}  peak RSS {max(r['peak_rss_mb'] for r in runs):6.0f} MB  "
              f"all rounds {[round(r['rows_per_s']) for r in runs]}  {extra}")  # fmt: skip


if __name__ == "__main__":
    main()
