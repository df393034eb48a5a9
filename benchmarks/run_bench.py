"""Benchmark the packed pipeline against its physical floor (see benchmarks/NOTES.md).

    .venv/bin/python benchmarks/run_bench.py --root bench_data --out benchmarks/results.json --batches 8

Generates the benchmark dataset under --root on first use (~25 s, ~140 MB), then measures
the pipeline in one process, the floor (the same images decoded + resized with Pillow
alone), moving batches to shared memory, the DataLoader with 0, 1 and 2 workers, the nested-mask mode, the checkpoint size, the
JSONL index memory and fast_decode; prints a table and writes everything to --out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bagel_bench.main import run_benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=None, help="dataset folder (bench_data; --quick: a temp folder)")
    parser.add_argument(
        "--out", type=Path, default=None, help="results JSON (benchmarks/results.json; --quick: a temp folder)"
    )
    parser.add_argument("--batches", type=int, default=8, help="packs per measured run")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round: a smoke test in about 15 s")
    parser.add_argument(
        "--warm-mb",
        type=int,
        default=None,
        help="MiB touched and freed before measuring (default 3072, 256 with --quick; 0: none)",
    )
    args = parser.parse_args()
    if args.batches < 1:
        parser.error("--batches must be at least 1")
    run_benchmark(args.root, args.out, batches=args.batches, quick=args.quick, warm_mb=args.warm_mb)


if __name__ == "__main__":
    main()
