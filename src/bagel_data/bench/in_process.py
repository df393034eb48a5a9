"""The benchmark's measurements in this process (`measure_in_process`).

One cold pack, one profiled and recorded run, then rounds that interleave the pipeline,
the floor (`floor.py`), the previous conversion path and `fast_decode`, so that each ratio
is taken within the same rounds; then the move to shared memory, `fast_decode` on the
recorded JPEGs and the nested-mask mode. `main.py` runs this beside the DataLoader and
JSONL measurements, each in a child interpreter (`runs.py`).
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import time
from pathlib import Path

import numpy as np
import yaml

from ..batch import collate_wrapper
from . import fast, physical
from . import runs as running
from .floor import replay_floor
from .mask_cost import mask_report
from .profiler import StageProfiler
from .progress import progress
from .recorder import WorkRecorder

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


def measure_in_process(paths: dict, packing: dict, batches: int, repeats: int, quick: bool) -> dict:
    tok, special = running.load_tokenizer_once()
    res: dict = {}
    # (b) one cold pack (first-use costs), one profiled + recorded run, then plain runs
    # interleaved with (a) the floor: the same images decoded + transformed alone.
    progress("one cold pack, then the profiled run")
    cold = _run_packs(running.build(paths, tok, special, packing), 1)["first_batch_seconds"]
    dataset = running.build(paths, tok, special, packing)
    with WorkRecorder() as recorder, StageProfiler(tok) as profiler:
        profiled = _run_packs(dataset, batches)
    res["checkpoint"] = {"bytes": len(pickle.dumps(dataset.state_dict()))}
    res["stages"] = profiler.breakdown(profiled["seconds"])
    work = recorder.work_of(profiled["packs"])
    fast_paths = {**paths, "grouped": _with_fast_decode(paths["grouped"])}
    runs, floors, previous, fast_runs = [], [], [], []
    for round_index in range(repeats):  # interleaved: each ratio is taken within the same rounds
        progress(f"pipeline / floor / previous path / fast_decode, round {round_index + 1} of {repeats}")
        gc.collect()
        running.reset_peak()
        runs.append(_run_packs(running.build(paths, tok, special, packing), batches))
        res.setdefault("process_peak_rss_mb", running.process_status(os.getpid()).get("VmHWM", 0) / 2**20)
        floors.append(replay_floor(recorder, work))
        with physical.previous_path():  # baseline: the conversion as it was before media/convert.py
            previous.append(_run_packs(running.build(paths, tok, special, packing), batches)["seconds"])
        fast_runs.append(_run_packs(running.build(fast_paths, tok, special, packing), batches))  # fast_decode: true
    best = min(runs, key=lambda r: r["seconds"])
    res["pipeline"] = {k: v for k, v in best.items() if k != "packs"}
    res["pipeline"].update(deterministic=all(_plain(r["packs"]) == _plain(profiled["packs"]) for r in runs),
                           all_seconds=[r["seconds"] for r in runs], profiled_seconds=profiled["seconds"],
                           cold_first_batch_seconds=cold)  # fmt: skip
    floor_s = min(f["seconds"] for f in floors)
    bandwidth = physical.write_bandwidth(128 if quick else 512)
    write_s = floors[0]["float32_bytes"] / bandwidth["bytes_per_second"]
    res["floor"] = {
        "seconds": floor_s, "all_seconds": [f["seconds"] for f in floors], "images": len(work),
        "transform_calls": sum(len(c) for c in work.values()), "pipeline_over_floor": best["seconds"] / floor_s,
        "float32_bytes": floors[0]["float32_bytes"], "write_bandwidth": bandwidth, "float32_write_seconds": write_s,
        "pipeline_over_floor_plus_write": best["seconds"] / (floor_s + write_s),
        "recorded_images": len(recorder.images),
        "pipeline_seconds_previous_path": min(previous), "all_seconds_previous_path": previous,
        "previous_path_over_floor": min(previous) / floor_s, "speedup_over_previous_path": min(previous) / best["seconds"],
    }  # fmt: skip
    res["floor"]["identical_to_previous_path"] = physical.same_batches(
        lambda: running.build(paths, tok, special, packing), min(batches, 2)
    )
    progress("moving batches to shared memory")
    res["transfer"] = physical.measure_transfer(lambda: running.build(paths, tok, special, packing), batches)

    # fast_decode on the JPEGs the packs held, and on JPEGs twice the target size.
    progress("fast_decode speed and pixel error")
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

    progress("nested-mask mode")
    # nested-mask mode (dense masks instead of split_lens / attn_modes)
    runs_nested = []
    warm_rebuild = None  # the same masks rebuilt in warm memory: the code's cost, not the VM's
    for _ in range(repeats):
        with WorkRecorder() as recorder, StageProfiler(tok) as profiler:
            run = _run_packs(running.build(paths, tok, special, packing, use_flex=False), batches)
        runs_nested.append((run, profiler.seconds["mask"], recorder.mask_rows(run["packs"])))
        if warm_rebuild is None:
            warm_rebuild = mask_report([recorder.warm_mask_rows(run["packs"], rounds=repeats)])
    fastest = min(runs_nested, key=lambda r: r[0]["seconds"])
    res["nested_mask"] = {"tokens_per_second": fastest[0]["tokens_per_second"], "seconds": fastest[0]["seconds"],
                          "all_seconds": [r[0]["seconds"] for r in runs_nested],
                          "mask_build_seconds": min(r[1] for r in runs_nested),
                          **mask_report([r[2] for r in runs_nested]), "warm_rebuild": warm_rebuild,
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
