"""`bagel-data bench read-ahead-load`: what the read-ahead costs and buys under load (issue 41).

Three cases, each against a baseline measured in the same invocation, the configurations
taking turns for `--rounds` rounds (medians, and the median of the ratios within a round):

- `first-batch`: a DataLoader of `--workers` workers over three T2I groups, every open and
  read +20 ms (`slow_reads.py`): seconds from `iter(loader)` to the first batch, and the
  requests (opens + reads, all workers) up to it, `read_ahead_bytes` 0 against 32 MiB;
- `local-cost`: one process drawing `--packs` packs from the same groups on local disk,
  each run a child process: its CPU seconds (all threads) and peak RSS, default settings
  against `read_ahead_bytes=0`;
- `small-shards`: one T2I group of 20-row shards of 64-px images: steady packs/s at +20 ms
  (`--delay`) with a 32 MiB read-ahead against the same shards read inline on local disk;
- `small-shards-reads`: the same shards through the family's reads alone (nothing decoded):
  row groups/s, the I/O side that a busy CPU cannot hide.

    python -m bagel_bench.read_ahead_load --case small-shards --out benchmarks/read_ahead_load.json

The shards are written under `--root` on first use (kept for later runs).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bagel_data.formats import T2I_SCHEMA
from bagel_data.synthetic.images import encode_image, photo_like_image

from .slow_reads import Tally, delayed_storage

BUDGET = 32 << 20  # the budget the issue measured (the default on object stores)
SPECIAL = {"bos_token_id": 151644, "eos_token_id": 151645, "start_of_image": 151652, "end_of_image": 151653}
PACKING: dict = {"expected_num_tokens": 32768, "max_num_tokens": 36864, "max_num_tokens_per_sample": 16384,
           "prefer_buffer_before": 16384, "max_buffer_size": 50, "max_latent_size": 64}  # fmt: skip
# (files, row groups per file, rows per row group, image side) of each case's shards.
GROUP_SHARDS = (16, 2, 16, 384)  # x 3 groups
SMALL_SHARDS = (240, 1, 20, 64)
CASES = ("first-batch", "local-cost", "small-shards", "small-shards-reads")


def write_shards(folder: Path, files: int, groups: int, rows: int, side: int, seed: int) -> Path:
    """T2I shards (JPEG images `side` px, one caption object each), kept when complete."""
    done = folder / ".complete"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for index in range(files):
        with pq.ParquetWriter(folder / f"part-{index:05d}.parquet", T2I_SCHEMA) as writer:
            for _ in range(groups):
                cells = [_row(rng, side, index) for _ in range(rows)]
                writer.write_table(pa.Table.from_pylist(cells, schema=T2I_SCHEMA), row_group_size=rows)
    done.touch()
    return folder


def _row(rng: np.random.Generator, side: int, index: int) -> dict:
    words = " ".join(rng.choice(["a", "red", "small", "house", "near", "the", "lake", "at", "dusk"], 12))
    image = encode_image(photo_like_image(rng, side, side), "JPEG", quality=90)
    return {"image": image, "captions": json.dumps({"caption_1": f"{words} ({index})"})}


def dataset(dirs: list[Path], side: int, workers: int, read_ahead: int | None, **settings):
    """The packed dataset over one T2I group per folder; `read_ahead` None: the default."""
    from bagel_data.assembly import build_packed_dataset
    from bagel_data.schema.settings import Settings
    from bagel_data.tokenizer import QwenTokenizer

    grouped, info = {}, {}
    for index, folder in enumerate(dirs):
        files = len(list(folder.glob("*.parquet")))
        grouped[f"t2i_{index}"] = {
            "dataset_class": "bagel_data.families.t2i:T2IIterableDataset",
            "dataset_names": [f"t2i_{index}"], "num_used_data": [files], "weight": 1.0,
            "image_transform_args": {"image_stride": 16, "max_image_size": side, "min_image_size": side // 2},
        }  # fmt: skip
        info[f"t2i_{index}"] = {f"t2i_{index}": {"data_dir": str(folder), "num_files": files}}
    chosen = {} if read_ahead is None else {"read_ahead_bytes": read_ahead}
    config = Settings(**{**PACKING, **settings, **chosen})
    return build_packed_dataset(
        QwenTokenizer(), SPECIAL, grouped, info, config, local_rank=0, world_size=1, num_workers=max(workers, 1)
    )


def first_batch(dirs: list[Path], side: int, workers: int, delay: float, read_ahead: int) -> dict:
    from bagel_data.loader import build_dataloader

    tally = Tally(shared=True)  # the workers fork with it
    with delayed_storage(delay, tally=tally):
        loader = build_dataloader(dataset(dirs, side, workers, read_ahead), num_workers=workers)
        start = time.perf_counter()
        batches = iter(loader)
        next(batches)
        seconds = time.perf_counter() - start
        counts = tally.reset()
        del batches  # its workers stop
    return {"seconds": seconds, "requests": counts["opens"] + counts["reads"], **counts}


def local_cost_child(dirs: list[Path], side: int, packs: int, read_ahead: int | None) -> dict:
    """One run in this process (a child of the benchmark): CPU seconds and peak RSS."""
    import torch

    torch.set_num_threads(1)  # as in a DataLoader worker
    packed = dataset(dirs, side, 1, read_ahead)
    start, wall = time.process_time(), time.perf_counter()
    stream = iter(packed)
    tokens = sum(int(next(stream)["sequence_length"]) for _ in range(packs))
    cpu, wall = time.process_time() - start, time.perf_counter() - wall
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    stats = packed.stats["read_ahead"]
    return {"cpu_s": cpu, "wall_s": wall, "peak_rss_mb": peak, "tokens": tokens, "read_ahead": stats}


def local_cost(dirs: list[Path], side: int, packs: int, read_ahead: int | None) -> dict:
    argv = [sys.executable, "-m", "bagel_bench.read_ahead_load", "--child", "--packs", str(packs),
            "--read-ahead", "default" if read_ahead is None else str(read_ahead), "--dirs", *map(str, dirs),
            "--side", str(side)]  # fmt: skip
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def steady(dirs: list[Path], side: int, delay: float, read_ahead: int, warmup: int, packs: int) -> dict:
    tally = Tally()
    with delayed_storage(delay, tally=tally):
        packed = dataset(dirs, side, 1, read_ahead)
        stream = iter(packed)
        for _ in range(warmup):
            next(stream)
        tally.reset()
        start = time.perf_counter()
        for _ in range(packs):
            next(stream)
        seconds = time.perf_counter() - start
        stats = packed.stats["read_ahead"]
        stream.close()
    counts = tally.reset()
    return {"packs_per_second": packs / seconds, "requests_per_pack": (counts["opens"] + counts["reads"]) / packs,
            "read_ahead": stats}  # fmt: skip


def reads_only(dirs: list[Path], side: int, delay: float, read_ahead: int, row_groups: int) -> dict:
    """Row groups/s through the T2I family's own reads (each unit's file, then its row
    groups, in the walk's order), nothing decoded: the I/O side alone, which a busy CPU
    cannot hide."""
    from bagel_data.families.t2i import COLUMNS
    from bagel_data.families.walk import walk

    tally = Tally()
    with delayed_storage(delay, tally=tally):
        family = dataset(dirs, side, 1, read_ahead).grouped_datasets[0]
        shard = family.worker_shard()
        stop = family.follow_stream(read_ahead, shard, 0, None)
        items = (item for phase in walk(shard, None, 0, None) for item in phase.items)
        done, start = 0, time.perf_counter()
        while done < row_groups:
            with family.reads.open_parquet(family.epoch_units[next(items).unit_id]) as reader:
                for group in range(reader.num_row_groups):
                    reader.read_row_group(group, COLUMNS)
                    done += 1
        seconds = time.perf_counter() - start
        stop()
    counts = tally.reset()
    return {"row_groups_per_second": done / seconds, "requests": counts["opens"] + counts["reads"],
            "read_ahead": family.read_ahead_stats()}  # fmt: skip


def rounds(runs: dict, count: int, figure: str, baseline: str) -> dict:
    """Each run of `runs` ({name: call}) `count` times, taking turns; medians and ratios."""
    seen: dict[str, list[dict]] = {name: [] for name in runs}
    for number in range(count):
        for name, call in runs.items():
            seen[name].append(call())
            print(f"round {number + 1} {name}: {json.dumps(seen[name][-1])[:300]}", flush=True)
    summary: dict = {}
    for name, results in seen.items():
        ratios = [result[figure] / base[figure] for result, base in zip(results, seen[baseline])]
        summary[name] = {"median": statistics.median(result[figure] for result in results),
                         "ratio_to_" + baseline: statistics.median(ratios), "rounds": results}  # fmt: skip
        for extra in ("requests", "peak_rss_mb"):
            if extra in results[0]:
                summary[name]["median_" + extra] = statistics.median(result[extra] for result in results)
    return summary


def run_case(case: str, root: Path, count: int, packs: int, workers: int, delay: float = 0.02) -> dict:
    small = case.startswith("small-shards")
    files, groups, rows, side = SMALL_SHARDS if small else GROUP_SHARDS
    names = ["small-shards-small"] if small else ["groups-a", "groups-b", "groups-c"]
    dirs = [write_shards(root / name, files, groups, rows, side, seed) for seed, name in enumerate(names)]
    if case == "first-batch":
        runs = {"inline": lambda: first_batch(dirs, side, workers, 0.02, 0),
                "read_ahead": lambda: first_batch(dirs, side, workers, 0.02, BUDGET)}  # fmt: skip
        return rounds(runs, count, "seconds", "inline")
    if case == "local-cost":
        runs = {"read_ahead_bytes=0": lambda: local_cost(dirs, side, packs, 0),
                "default": lambda: local_cost(dirs, side, packs, None),
                "read_ahead_bytes=32MiB": lambda: local_cost(dirs, side, packs, BUDGET)}  # fmt: skip
        return rounds(runs, count, "cpu_s", "read_ahead_bytes=0")
    at = f"+{delay * 1000:.0f}ms"
    if case == "small-shards-reads":
        runs = {"local inline": lambda: reads_only(dirs, side, 0.0, 0, 200),
                f"{at} inline": lambda: reads_only(dirs, side, delay, 0, 40),
                f"{at} read_ahead": lambda: reads_only(dirs, side, delay, BUDGET, 200)}  # fmt: skip
        return rounds(runs, count, "row_groups_per_second", "local inline")
    runs = {"local inline": lambda: steady(dirs, side, 0.0, 0, 2, packs),
            f"{at} inline": lambda: steady(dirs, side, delay, 0, 2, packs),
            f"{at} read_ahead": lambda: steady(dirs, side, delay, BUDGET, 2, packs)}  # fmt: skip
    return rounds(runs, count, "packs_per_second", "local inline")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bagel-data bench read-ahead-load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=CASES, action="append", help="default: all")
    parser.add_argument("--root", type=Path, default=Path("bench_data/read_ahead_load"), help="where the shards go")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--packs", type=int, default=8, help="packs per run (local-cost, small-shards)")
    parser.add_argument("--workers", type=int, default=8, help="DataLoader workers (first-batch)")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per round trip (small-shards cases)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--read-ahead", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--dirs", nargs="*", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--side", type=int, default=GROUP_SHARDS[3], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        budget = None if args.read_ahead == "default" else int(args.read_ahead)
        print(json.dumps(local_cost_child(args.dirs, args.side, args.packs, budget)))
        return
    results: dict = {"command": "bagel-data bench read-ahead-load " + " ".join(argv or sys.argv[1:])}
    for case in args.case or CASES:
        results[case] = run_case(case, args.root.resolve(), args.rounds, args.packs, args.workers, args.delay)
        print(
            case,
            json.dumps({name: {k: v for k, v in row.items() if k != "rounds"} for name, row in results[case].items()}),
            flush=True,
        )
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
