"""`run_benchmark`: the packed pipeline measured against its physical floor.

Sections of the result (also written to `out_json`): the pipeline in one process, the
floor (the same images decoded + resized + tensorized alone) and their ratio, a per-stage
breakdown, the DataLoader with 1 and 2 workers (throughput and peak RSS per process, each
in a fresh interpreter), the nested-mask mode, the checkpoint size, the JSONL index memory
and the opt-in `fast_decode`. Every ratio is against a baseline measured in the same run.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from ..batch import collate_wrapper
from ..packing.packed_dataset import PackedDataset
from ..synthetic.dataset import DemoSizes, write_demo_dataset
from . import fast as fast
from . import floor as floor
from . import runs as running

PACKING = {
    "expected_num_tokens": 32768, "max_num_tokens": 36864, "max_num_tokens_per_sample": 16384,
    "prefer_buffer_before": 16384, "max_buffer_size": 50, "use_flex": True, "max_latent_size": 64,
    "vit_patch_size": 14, "max_num_patch_per_side": 70,
}  # fmt: skip
QUICK_PACKING = {**PACKING, "expected_num_tokens": 7680, "max_num_tokens": 8192,
                 "max_num_tokens_per_sample": 4096, "prefer_buffer_before": 4096}  # fmt: skip
SECTIONS = (
    "config",
    "pipeline",
    "floor",
    "stages",
    "loader",
    "nested_mask",
    "checkpoint",
    "jsonl_index",
    "fast_decode",
)
_now = time.perf_counter


def _run_packs(dataset, batches: int) -> dict:
    """Draw `batches` packs in this process (collated, as the loader would); times and indexes."""
    collate, packs, stamps, tokens = collate_wrapper(), [], [], 0
    start = _now()
    iterator = iter(dataset)
    for _ in range(batches):
        batch = collate([next(iterator)])
        stamps.append(_now() - start)
        tokens += batch.sequence_length
        packs.append(batch.batch_data_indexes)
        del batch
    iterator.close()
    seconds = stamps[-1]
    samples = sum(len(pack) for pack in packs)
    return {
        "seconds": seconds, "first_batch_seconds": stamps[0], "tokens": tokens, "samples": samples,
        "tokens_per_second": tokens / seconds, "samples_per_second": samples / seconds,
        "pack_seconds": list(np.diff([0.0, *stamps])), "packs": packs,
    }  # fmt: skip


def _plain(packs) -> list:
    return [[(w["dataset_name"], w["worker_id"], json.dumps(w["data_indexes"])) for w in pack] for pack in packs]


def warm_memory(megabytes: int) -> dict:
    """Touch, then free, `megabytes` of memory before anything is measured.

    Where the host backs a VM's memory lazily (the development VM: about 0.7 ms per MB), the
    first touch of memory no process has used since boot costs far more than a page fault,
    while freed pages are reused at the normal cost. Measured here: the same 8.7 k-token mask
    took 18 ms in warm memory and 220-400 ms in never-touched memory. Warming first keeps
    that one-off cost of the machine out of the pipeline's figures; the seconds it took are
    reported, so the effect is visible.
    """
    start = _now()
    block = np.ones(max(megabytes, 0) << 18, dtype=np.float32)  # 4 bytes each: `megabytes` MiB
    del block
    seconds = _now() - start
    return {"megabytes": megabytes, "seconds": seconds, "mb_per_second": megabytes / max(seconds, 1e-9)}


def run_benchmark(root: Path, out_json: Path, *, batches: int, quick: bool = False, warm_mb: int | None = None) -> dict:
    """Run every measurement on the benchmark dataset under `root`; write and return the results.

    `warm_mb` (default 3072, 256 with `quick`) is touched and freed first (`warm_memory`).
    """
    root, started = Path(root), _now()
    sizes = DemoSizes.demo() if quick else DemoSizes.bench()
    made = write_demo_dataset(root, sizes, seed=0)  # returns at once when already there
    paths = {"grouped": str(made.grouped_datasets), "info": str(made.dataset_info)}
    packing, repeats = (QUICK_PACKING, 1) if quick else (PACKING, 3)
    res: dict = {"config": {"root": str(root), "batches": batches, "quick": quick, "packing": packing,
                            "cpus": os.cpu_count(), "repeats": repeats, "torch_threads_in_process": 1}}  # fmt: skip
    res["config"]["warm_memory"] = warm_memory((256 if quick else 3072) if warm_mb is None else warm_mb)
    # One intra-op thread, as in a DataLoader worker: on a shared 2-core machine a second
    # OpenMP thread waits for a free core and makes torch's fills erratic.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res.update(_in_process(paths, packing, batches, repeats, quick))
    finally:
        torch.set_num_threads(threads)
    loader: dict = {1: [], 2: []}  # (c) through the DataLoader, each run in a fresh interpreter
    for _ in range(min(repeats, 2)):
        for workers, runs in loader.items():
            runs.append(
                running.run_child(
                    "loader", {"paths": paths, "packing": packing, "workers": workers, "batches": batches}
                )
            )
    res["loader"] = {}
    for workers, runs in loader.items():
        run = max(runs, key=lambda r: r["tokens_per_second"])
        run["all_tokens_per_second"] = [r["tokens_per_second"] for r in runs]
        run["relative_to_in_process"] = run["tokens_per_second"] / res["pipeline"]["tokens_per_second"]
        res["loader"][f"workers_{workers}"] = run
    lines = 10_000 if quick else 1_000_000
    jsonl = running.write_jsonl(root / "jsonl_index" / f"rows_{lines}.jsonl", lines)
    res["jsonl_index"] = running.run_child("jsonl", {"path": str(jsonl), "lines": lines})
    res["total_seconds"] = _now() - started
    Path(out_json).parent.mkdir(parents=True, exist_ok=True)
    Path(out_json).write_text(json.dumps(res, indent=2, default=float))
    print_report(res)
    return res


def _in_process(paths: dict, packing: dict, batches: int, repeats: int, quick: bool) -> dict:
    tok, special = running.load_tokenizer_once()
    res: dict = {}
    # (b) one cold pack (first-use costs), one profiled + recorded run, then plain runs
    # interleaved with (a) the floor: the same images decoded + transformed alone.
    cold = _run_packs(running.build(paths, tok, special, packing), 1)["first_batch_seconds"]
    dataset = running.build(paths, tok, special, packing)
    with floor.WorkRecorder() as recorder, floor.StageProfiler(tok) as profiler:
        profiled = _run_packs(dataset, batches)
    res["checkpoint"] = {"bytes": len(pickle.dumps(dataset.state_dict()))}
    res["stages"] = profiler.breakdown(profiled["seconds"])
    work = recorder.work_of(profiled["packs"])
    fast_paths = {**paths, "grouped": _with_fast_decode(paths["grouped"])}
    runs, floors, no_pool, fast_runs = [], [], [], []
    for _ in range(repeats):
        gc.collect()
        running.reset_peak()
        runs.append(_run_packs(running.build(paths, tok, special, packing), batches))
        res.setdefault("process_peak_rss_mb", running.process_status(os.getpid()).get("VmHWM", 0) / 2**20)
        floors.append(floor.replay_floor(recorder, work))
        with _without_pad_pool():  # baseline: padded_images into fresh zeros, no buffer reuse
            no_pool.append(_run_packs(running.build(paths, tok, special, packing), batches)["seconds"])
        fast_runs.append(_run_packs(running.build(fast_paths, tok, special, packing), batches))  # fast_decode: true
    best = min(runs, key=lambda r: r["seconds"])
    res["pipeline"] = {k: v for k, v in best.items() if k != "packs"}
    res["pipeline"].update(deterministic=all(_plain(r["packs"]) == _plain(profiled["packs"]) for r in runs),
                           all_seconds=[r["seconds"] for r in runs], profiled_seconds=profiled["seconds"],
                           cold_first_batch_seconds=cold)  # fmt: skip
    floor_all = floor.replay_floor(recorder, recorder.work_of(None))
    res["floor"] = {
        "seconds": min(floors), "all_seconds": floors, "images": len(work),
        "transform_calls": sum(len(c) for c in work.values()), "efficiency": min(floors) / best["seconds"],
        "recorded_images": len(recorder.images), "all_built_samples_seconds": floor_all,
        "efficiency_vs_all_built": floor_all / best["seconds"],
        "pipeline_seconds_without_pad_pool": min(no_pool), "efficiency_without_pad_pool": min(floors) / min(no_pool),
        "all_seconds_without_pad_pool": no_pool,
    }  # fmt: skip

    # fast_decode on the JPEGs the packs held, and on JPEGs twice the target size.
    jpegs = recorder.jpeg_work(work)[: 12 if quick else None]
    twice = fast.twice_target_items(list({id(t): t for _, c in jpegs for t, _ in c}.values()), 2 if quick else 6)
    res["fast_decode"] = {
        "bench_images": fast.measure_fast_decode(jpegs, rounds=repeats),
        "bench_images_pillow_only": fast.measure_fast_decode(jpegs, rounds=repeats, simplejpeg=False),
        "twice_target": fast.measure_fast_decode(twice, rounds=repeats),
        "twice_target_pillow_only": fast.measure_fast_decode(twice, rounds=repeats, simplejpeg=False),
        "simplejpeg": fast.simplejpeg_check([data for data, _ in jpegs]),
        "pipeline": {"tokens_per_second": max(r["tokens_per_second"] for r in fast_runs),
                     "all_seconds": [r["seconds"] for r in fast_runs],
                     "relative_to_exact": best["seconds"] / min(r["seconds"] for r in fast_runs),
                     "same_packs": all(_plain(r["packs"]) == _plain(profiled["packs"]) for r in fast_runs)},
    }  # fmt: skip
    del recorder, work, jpegs, twice, dataset

    # nested-mask mode (dense masks instead of split_lens / attn_modes)
    runs_nested = []
    warm_rebuild = None  # the same masks rebuilt in warm memory: the code's cost, not the VM's
    for _ in range(repeats):
        with floor.WorkRecorder() as recorder, floor.StageProfiler(tok) as profiler:
            run = _run_packs(running.build(paths, tok, special, packing, use_flex=False), batches)
        runs_nested.append((run, profiler.seconds["mask"], recorder.mask_rows(run["packs"])))
        if warm_rebuild is None:
            warm_rebuild = floor.mask_report([recorder.warm_mask_rows(run["packs"], rounds=repeats)])
    fastest = min(runs_nested, key=lambda r: r[0]["seconds"])
    res["nested_mask"] = {"tokens_per_second": fastest[0]["tokens_per_second"], "seconds": fastest[0]["seconds"],
                          "all_seconds": [r[0]["seconds"] for r in runs_nested],
                          "mask_build_seconds": min(r[1] for r in runs_nested),
                          **floor.mask_report([r[2] for r in runs_nested]), "warm_rebuild": warm_rebuild,
                          "relative_to_flex": fastest[0]["tokens_per_second"] / best["tokens_per_second"]}  # fmt: skip
    return res


def _with_fast_decode(grouped_path: str) -> dict:
    """The grouped-datasets config with `fast_decode: true` in every image transform."""
    grouped = yaml.safe_load(Path(grouped_path).read_text())
    for group in grouped.values():
        for key in ("image_transform_args", "vit_image_transform_args"):
            if key in group:
                group[key]["fast_decode"] = True
    return grouped


def _without_pad_pool() -> floor.Patcher:
    """Baseline: a fresh zero-filled `padded_images` per pack, through the pool hook."""
    patcher = floor.Patcher()
    patcher.wrap(PackedDataset, "pad_pool_factory", lambda _: fast.FreshZeroPool)
    return patcher


def print_report(res: dict) -> None:
    """The headline numbers as a rich table."""
    from rich.console import Console
    from rich.table import Table

    pipe, flo, nest, jl, fd = res["pipeline"], res["floor"], res["nested_mask"], res["jsonl_index"], res["fast_decode"]
    sj = fd["simplejpeg"]
    warm = res["config"]["warm_memory"]
    rows = [
        ("memory warmed first", f"{warm['megabytes']} MiB in {warm['seconds']:.2f} s ({warm['mb_per_second']:,.0f} MiB/s)"),
        ("pipeline, 1 process", (f"{pipe['tokens_per_second']:,.0f} tok/s, {pipe['samples_per_second']:.1f} samples/s, "
                                 f"first batch {pipe['first_batch_seconds']:.2f} s "
                                 f"(cold {pipe['cold_first_batch_seconds']:.2f} s)")),
        ("floor (decode+resize+tensorize)", f"{flo['seconds']:.2f} s vs pipeline {pipe['seconds']:.2f} s"),
        ("efficiency floor / pipeline", (f"{flo['efficiency']:.3f} (vs all built samples "
                                         f"{flo['efficiency_vs_all_built']:.3f}; without the padded_images pool "
                                         f"{flo['efficiency_without_pad_pool']:.3f})")),
    ]  # fmt: skip
    rows += [
        (f"  stage {k}", f"{v['seconds']:.2f} s ({v['share']:.0%}), {v['calls']} calls")
        for k, v in res["stages"].items()
    ]
    for run in res["loader"].values():
        workers = [w.get("VmHWM_mb", 0) for w in run["peak_rss"]["workers"]]
        main = run["peak_rss"]["main"].get("VmHWM_mb", 0)
        rows.append(
            (
                f"DataLoader, {run['workers']} worker(s)",
                (
                    f"{run['tokens_per_second']:,.0f} tok/s, {run['samples_per_second']:.1f} samples/s "
                    f"(x{run['relative_to_in_process']:.2f} of 1 process), "
                    f"first batch {run['first_batch_seconds']:.2f} s, peak RSS main {main:.0f} MB, workers {workers} MB"
                ),
            )
        )
    m = nest["by_group"]["all"]
    rows.append(
        (
            "nested masks",
            (
                f"{nest['tokens_per_second']:,.0f} tok/s; mask < image work in "
                f"{m['mask_cheaper_than_images']}/{m['samples']} samples, "
                f"max ratio {m['max_mask_to_image_ratio']:.2f}"
            ),
        )
    )
    m = nest["warm_rebuild"]["by_group"]["all"]
    rows.append(
        (
            "nested masks rebuilt in warm memory",
            (
                f"mask < image work in {m['mask_cheaper_than_images']}/"
                f"{m['samples']} samples, max ratio {m['max_mask_to_image_ratio']:.2f}"
            ),
        )
    )
    rows.append(("checkpoint", f"{res['checkpoint']['bytes']:,} bytes"))
    rows.append(
        (
            "JSONL index",
            (
                f"{jl['bytes_per_line']:.1f} B/line held ({jl['lines']:,} lines), "
                f"peak RSS +{jl['peak_rss_delta_mb']:.0f} MB while building"
            ),
        )
    )
    fp = fd["pipeline"]
    rows.append(
        (
            "pipeline with fast_decode: true",
            (
                f"{fp['tokens_per_second']:,.0f} tok/s "
                f"(x{fp['relative_to_exact']:.2f} of exact), same packs {fp['same_packs']}"
            ),
        )
    )
    for name, v in fd.items():
        if name not in ("simplejpeg", "pipeline"):
            psnr = "identical" if v["psnr_db"] is None else f"PSNR {v['psnr_db']:.1f} dB"
            rows.append(
                (
                    f"fast_decode, {name}",
                    (
                        f"x{v['speedup']:.2f}, {v['drafted']}/{v['images']} drafted, "
                        f"mean |diff| {v['mean_abs_diff']:.4f}, max {v['max_abs_diff']:.3f}, {psnr}"
                    ),
                )
            )
    if sj["available"]:
        modes = {
            m: (e["identical_full_scale"], e["identical_half_scale"], e["images"]) for m, e in sj["by_mode"].items()
        }
        rows.append(
            (
                "simplejpeg",
                f"identical to Pillow (full, half scale, of) by mode {modes}, decode x{sj['decode_speedup']:.2f}",
            )
        )
    else:
        rows.append(("simplejpeg", "not installed"))
    table = Table(title=f"bagel-data benchmark ({res['config']['batches']} packs)", show_header=False)
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)
