"""bagel-data against the reference, side by side in one run, on a run config's data.

    PYTHONPATH=src:benchmarks python scripts/reference_compare.py --config benchmarks/bagel_run.yaml \
        --reference-python ../refvenv/bin/python --rounds 5 --out benchmarks/reference_results.json

Each round runs, each in a fresh child process with one intra-op thread: the reference
(`scripts/reference_bench.py`, in the side virtual environment that has `nemo_automodel` and
torchvision), then bagel-data with the float32 default, with `pixel_format: uint8`, and with
the opt-in faster floor (`bench.approximate.OPTIONS`: `resize_backend: torch` + `fast_decode`,
uint8), and float32 with
`compat: bagel` (the reference's packing rules and draws: the very same packs, which the
default mode does not give, as it decides CFG dropout before packing). Every child draws
`--warmup` packs from a new iterator and times the next `--batches`, collated, as the
reference script does; the order of the sides is reversed every other round. Ratios are
taken within each round and their median reported (the load moves between rounds); the
tokens per second are the best of the rounds per side, peak RSS the largest (also without
what importing torch costs, which differs between a CUDA and a CPU build).
Each variant's packs are compared with the reference's (`same_packs_as_reference`).

Each round also times the floor (`floor`): Pillow's decode and resize of exactly the images
of the reference's timed packs (bagel-data's `compat: bagel` run records them; the replay is
`bagel_bench.floor.replay_floor`, best of two), nothing else. No bit-exact pipeline can
do less on one core, so the reference's CPU seconds over the floor's is the ceiling of any
exact pipeline's ratio to the reference (`ceiling_over_reference_per_cpu_second`).

Once per run (it is deterministic), the faster floor's pixels are held against the exact
path's (`faster_floor_psnr`): a child builds the exact uint8 variant, records which images
its timed packs hold (the faster floor's packs are the same packs: checked, `same_packs`),
and compares every such image resized exactly and with the faster floor's options, per
group and over all of them (`bagel_bench.approximate.pixel_error`, as `bench config` does).
`--sides` runs a subset of the sides in the rounds (the reference always runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch, in the children

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from reference_bench import peak_rss_mb, time_packs  # noqa: E402  (stdlib-only at import: both venvs load it)

VARIANTS = ("float32", "uint8", "faster_floor", "float32_compat")
FLOOR_REPLAYS = 2


def run_psnr(config: Path, batches: int, warmup: int) -> dict:
    """The faster floor's resized pixels against the exact path's, on the images of the
    exact uint8 variant's timed packs (see the module docstring), in this process."""
    import dataclasses

    import torch

    from bagel_bench.approximate import all_groups, group_of_transforms, pixel_error
    from bagel_bench.recorder import WorkRecorder
    from bagel_bench.runs import load_tokenizer_once
    from bagel_data.batch import collate_wrapper
    from bagel_data.tools.run import build_from_run_config, load_run_config

    torch.set_num_threads(1)
    run = load_run_config(str(config))
    run = dataclasses.replace(run, packing={**run.packing, "pixel_format": "uint8"})
    tok, _ = load_tokenizer_once()
    with WorkRecorder() as recorder:
        dataset = build_from_run_config(run, rank=0, world_size=1, num_workers=1, tokenizer=tok).dataset
        packs = time_packs(dataset, collate_wrapper(), batches, warmup)["packs"]
        work = recorder.work_of(packs)
        groups = pixel_error(recorder, work, group_of_transforms(dataset))
    return {"side": "psnr", "packs": packs, "all_groups": all_groups(groups), "by_group": groups}


def run_floor(config: Path, batches: int, warmup: int) -> dict:
    """The floor of the reference's timed packs (see the module docstring), in this process."""
    import dataclasses

    import torch

    from bagel_bench.floor import replay_floor
    from bagel_bench.recorder import WorkRecorder
    from bagel_bench.runs import load_tokenizer_once
    from bagel_data.batch import collate_wrapper
    from bagel_data.tools.run import build_from_run_config, load_run_config

    torch.set_num_threads(1)
    run = dataclasses.replace(load_run_config(str(config)), compat="bagel")
    tok, _ = load_tokenizer_once()
    with WorkRecorder() as recorder:
        dataset = build_from_run_config(run, rank=0, world_size=1, num_workers=1, tokenizer=tok).dataset
        packs = time_packs(dataset, collate_wrapper(), batches, warmup)["packs"]
        work = recorder.work_of(packs)
        replays = []
        for _ in range(FLOOR_REPLAYS):
            cpu_start = time.process_time()
            replay = replay_floor(recorder, work)
            replays.append({"cpu_seconds": time.process_time() - cpu_start, "wall_seconds": replay["seconds"]})
    return {
        "side": "floor", "images": len(work), "resizes": sum(len(calls) for calls in work.values()),
        "cpu_seconds": min(r["cpu_seconds"] for r in replays), "wall_seconds": min(r["wall_seconds"] for r in replays),
        "packs": packs,
    }  # fmt: skip


def run_ours(config: Path, variant: str, batches: int, warmup: int) -> dict:
    """One bagel-data measurement in this process (a child of `compare`)."""
    import dataclasses

    import torch

    rss_torch = peak_rss_mb()  # a training process has torch loaded on either side

    from bagel_bench.approximate import approximate_grouped
    from bagel_bench.runs import load_tokenizer_once
    from bagel_data.batch import collate_wrapper
    from bagel_data.tools.run import build_from_run_config, load_run_config

    torch.set_num_threads(1)
    run = load_run_config(str(config))
    grouped = approximate_grouped(run.grouped_datasets) if variant == "faster_floor" else run.grouped_datasets
    pixel_format = "float32" if variant.startswith("float32") else "uint8"
    run = dataclasses.replace(run, grouped_datasets=grouped, packing={**run.packing, "pixel_format": pixel_format})
    if variant == "float32_compat":  # the reference's packing rules and random draws: the same packs
        run = dataclasses.replace(run, compat="bagel")
    tok, _ = load_tokenizer_once()
    rss_imports = peak_rss_mb()  # every import and the tokenizer, before the dataset
    dataset = build_from_run_config(run, rank=0, world_size=1, num_workers=1, tokenizer=tok).dataset
    timed = time_packs(dataset, collate_wrapper(), batches, warmup)
    return {
        "side": "bagel-data", "variant": variant, **timed,
        "peak_rss_mb": peak_rss_mb(), "rss_after_torch_import_mb": rss_torch, "rss_after_imports_mb": rss_imports,
        "batches": batches, "warmup_packs": warmup,
    }  # fmt: skip


def child(command: list[str], env: dict) -> dict:
    out = subprocess.run(command, env=env, cwd=REPO, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def plain(packs: list) -> list:
    return [[(w["dataset_name"], json.dumps(w["data_indexes"])) for w in pack] for pack in packs]


def best(runs: list[dict]) -> dict:
    return {
        "tokens": runs[0]["tokens"],
        "tokens_per_cpu_second": max(r["tokens_per_cpu_second"] for r in runs),
        "tokens_per_second": max(r["tokens_per_second"] for r in runs),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        # Without what importing torch itself costs: the side venv's torch is a CUDA build (the
        # only torch beside which torchvision installs here), ours a CPU build.
        "rss_after_torch_import_mb": max(r["rss_after_torch_import_mb"] for r in runs),
        "rss_after_imports_mb": max(r["rss_after_imports_mb"] for r in runs),
        "peak_rss_above_torch_import_mb": max(r["peak_rss_mb"] - r["rss_after_torch_import_mb"] for r in runs),
        "all_tokens_per_cpu_second": [r["tokens_per_cpu_second"] for r in runs],
        "all_tokens_per_second": [r["tokens_per_second"] for r in runs],
    }


def compare(args: argparse.Namespace) -> dict:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "benchmarks")]),
    }
    common = ["--config", str(args.config), "--batches", str(args.batches), "--warmup", str(args.warmup)]
    ref_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}  # nothing of ours on the reference's path
    sides = [side for side in (*VARIANTS, "floor") if side in args.sides]
    runs: dict[str, list[dict]] = {"reference": [], **{side: [] for side in sides}}
    psnr = child([sys.executable, __file__, "--child", "psnr", *common], env) if "faster_floor" in sides else None
    loads = []
    for index in range(args.rounds):
        loads.append(os.getloadavg())
        print(f"round {index + 1} of {args.rounds}, load {loads[-1][0]:.2f}", file=sys.stderr)
        order = ["reference", *sides]
        for side in order if index % 2 == 0 else order[::-1]:  # neither side always runs first
            if side == "reference":
                command = [args.reference_python, str(REPO / "scripts" / "reference_bench.py"), *common]
                runs[side].append(child(command, ref_env))
            else:
                runs[side].append(child([sys.executable, __file__, "--child", side, *common], env))
    ref = best(runs["reference"])
    res: dict = {
        "config": {"run_config": str(args.config.relative_to(REPO) if args.config.is_relative_to(REPO) else args.config),
                   "batches": args.batches, "warmup_packs": args.warmup, "rounds": args.rounds,
                   "one_process": True, "OMP_NUM_THREADS": 1, "torch_threads": 1},
        "load_average_at_round_start": loads, "cpus": os.cpu_count(),
        "reference_versions": runs["reference"][0]["versions"], "reference": ref,
    }  # fmt: skip
    ref_packs = plain(runs["reference"][0]["packs"])
    if "floor" in sides:
        res["floor"] = floor_summary(runs["reference"], runs["floor"], ref_packs)
    if psnr is not None:
        res["faster_floor_psnr"] = {
            "same_packs": plain(psnr["packs"]) == plain(runs["faster_floor"][0]["packs"]),
            **psnr["all_groups"], "by_group": psnr["by_group"],
        }  # fmt: skip
    for variant in (side for side in VARIANTS if side in sides):
        ours = best(runs[variant])
        ours["same_packs_as_reference"] = plain(runs[variant][0]["packs"]) == ref_packs
        ours["same_pack_shapes_as_reference"] = [
            {k: v for k, v in s.items() if k in ("tokens", "samples")} for s in runs[variant][0]["pack_shapes"]
        ] == [{k: v for k, v in s.items() if k in ("tokens", "samples")} for s in runs["reference"][0]["pack_shapes"]]
        # Paired within each round (the load moves between rounds); the median is the headline.
        for unit in ("tokens_per_cpu_second", "tokens_per_second"):
            pairs = [o[unit] / r[unit] for o, r in zip(runs[variant], runs["reference"])]
            name = "per_cpu_second" if unit == "tokens_per_cpu_second" else "per_second"
            ours[f"over_reference_{name}"] = statistics.median(pairs)
            ours[f"over_reference_{name}_by_round"] = pairs
        ours["rss_over_reference"] = ours["peak_rss_mb"] / ref["peak_rss_mb"]
        above = "peak_rss_above_torch_import_mb"
        ours["rss_above_torch_import_over_reference"] = ours[above] / ref[above]
        res[variant] = ours
    res["load_average_at_end"] = os.getloadavg()
    res["pack_shapes"] = {
        side: runs[side][0]["pack_shapes"] for side in ("reference", "float32", "uint8") if side in runs
    }
    return res


def floor_summary(references: list[dict], floors: list[dict], ref_packs: list) -> dict:
    ceilings = [r["cpu_seconds"] / f["cpu_seconds"] for r, f in zip(references, floors)]
    return {
        "of_the_reference_packs": plain(floors[0]["packs"]) == ref_packs,
        "images": floors[0]["images"], "resizes": floors[0]["resizes"],
        "cpu_seconds": min(f["cpu_seconds"] for f in floors), "all_cpu_seconds": [f["cpu_seconds"] for f in floors],
        "ceiling_over_reference_per_cpu_second": statistics.median(ceilings),
        "ceiling_over_reference_per_cpu_second_by_round": ceilings,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "benchmarks" / "bagel_run.yaml")
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reference-python", default="../refvenv/bin/python")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--sides", type=lambda text: text.split(","), default=[*VARIANTS, "floor"],
        help=f"comma-separated sides beside the reference (default: all of {','.join((*VARIANTS, 'floor'))})",
    )  # fmt: skip
    parser.add_argument("--child", choices=(*VARIANTS, "floor", "psnr"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.config = args.config.resolve()
    unknown = set(args.sides) - {*VARIANTS, "floor"}
    if unknown:
        parser.error(f"--sides: unknown {sorted(unknown)}; choose from {','.join((*VARIANTS, 'floor'))}")
    if args.child in ("floor", "psnr"):
        measure = run_floor if args.child == "floor" else run_psnr
        print(json.dumps(measure(args.config, args.batches, args.warmup), default=str))
        return
    if args.child is not None:
        print(json.dumps(run_ours(args.config, args.child, args.batches, args.warmup), default=str))
        return
    res = compare(args)
    text = json.dumps(res, indent=1, default=str)
    if args.out is not None:
        args.out.write_text(text + "\n")
    summary = {k: res[k] for k in ("reference", *VARIANTS, "floor", "faster_floor_psnr") if k in res}
    for value in summary.values():
        value.pop("all_tokens_per_second", None)
        value.pop("by_group", None)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
