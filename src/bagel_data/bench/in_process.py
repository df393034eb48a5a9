"""The benchmark's measurements in this process (`measure_in_process`).

One cold pack, one profiled and recorded run, then rounds that interleave the pipeline,
the floor (`floor.py`), the previous conversion path and `fast_decode`, so that each ratio
is taken within the same rounds; then the move to shared memory, `fast_decode` on the
recorded JPEGs and the nested-mask mode. `main.py` runs this beside the DataLoader and
JSONL measurements, each in a child interpreter (`runs.py`).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import pickle
import time
from pathlib import Path
from typing import Any

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


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What every in-process measurement builds its packed datasets from."""

    paths: dict
    packing: dict
    batches: int
    repeats: int
    quick: bool
    tok: Any
    special: dict

    def build(self, paths: dict | None = None, **override):
        """A fresh packed dataset of the benchmark's config (`paths`: another dataset's)."""
        return running.build(self.paths if paths is None else paths, self.tok, self.special, self.packing, **override)


@dataclasses.dataclass
class _Rounds:
    """The interleaved rounds' results: pipeline runs, floors, previous-path seconds, fast_decode runs."""

    runs: list = dataclasses.field(default_factory=list)
    floors: list = dataclasses.field(default_factory=list)
    previous: list = dataclasses.field(default_factory=list)
    fast: list = dataclasses.field(default_factory=list)
    peak_rss_mb: float | None = None  # of this process, after the first round's pipeline run


def measure_in_process(paths: dict, packing: dict, batches: int, repeats: int, quick: bool) -> dict:
    """Every section measured in this process: checkpoint, stages, pipeline, floor,
    transfer, fast_decode and nested masks (with this process's peak memory)."""
    tok, special = running.load_tokenizer_once()
    setup = _Setup(paths, packing, batches, repeats, quick, tok, special)
    res: dict = {}
    # (b) one cold pack (first-use costs), one profiled + recorded run, then plain runs
    # interleaved with (a) the floor: the same images decoded + transformed alone.
    progress("one cold pack, then the profiled run")
    cold = _run_packs(setup.build(), 1)["first_batch_seconds"]
    dataset = setup.build()
    with WorkRecorder() as recorder, StageProfiler(tok) as profiler:
        profiled = _run_packs(dataset, batches)
    res["checkpoint"] = {"bytes": len(pickle.dumps(dataset.state_dict()))}
    res["stages"] = profiler.breakdown(profiled["seconds"])
    work = recorder.work_of(profiled["packs"])
    rounds = _interleaved_rounds(setup, recorder, work)
    res["process_peak_rss_mb"] = rounds.peak_rss_mb
    best = min(rounds.runs, key=lambda r: r["seconds"])
    res["pipeline"] = {k: v for k, v in best.items() if k != "packs"}
    res["pipeline"].update(deterministic=all(_plain(r["packs"]) == _plain(profiled["packs"]) for r in rounds.runs),
                           all_seconds=[r["seconds"] for r in rounds.runs], profiled_seconds=profiled["seconds"],
                           cold_first_batch_seconds=cold)  # fmt: skip
    res["floor"] = _floor_section(setup, rounds, best, work, len(recorder.images))
    progress("moving batches to shared memory")
    res["transfer"] = physical.measure_transfer(setup.build, batches)
    res["fast_decode"] = _fast_decode_section(setup, recorder, work, rounds.fast, best, profiled)
    del recorder, work, dataset
    res["nested_mask"] = _nested_mask_section(setup, best)
    return res


def _interleaved_rounds(setup: _Setup, recorder: WorkRecorder, work: dict) -> _Rounds:
    """The pipeline, the floor, the previous path and fast_decode, round after round, so that
    each ratio is taken within the same rounds."""
    fast_paths = {**setup.paths, "grouped": _with_fast_decode(setup.paths["grouped"])}
    rounds = _Rounds()
    for round_index in range(setup.repeats):
        progress(f"pipeline / floor / previous path / fast_decode, round {round_index + 1} of {setup.repeats}")
        gc.collect()
        running.reset_peak()
        rounds.runs.append(_run_packs(setup.build(), setup.batches))
        if rounds.peak_rss_mb is None:
            rounds.peak_rss_mb = running.process_status(os.getpid()).get("VmHWM", 0) / 2**20
        rounds.floors.append(replay_floor(recorder, work))
        with physical.previous_path():  # baseline: the conversion as it was before media/convert.py
            rounds.previous.append(_run_packs(setup.build(), setup.batches)["seconds"])
        rounds.fast.append(_run_packs(setup.build(fast_paths), setup.batches))  # fast_decode: true
    return rounds


def _floor_section(setup: _Setup, rounds: _Rounds, best: dict, work: dict, recorded_images: int) -> dict:
    """The floor against the pipeline's best run and the previous path, and the float32
    write beside it."""
    floors, previous = rounds.floors, rounds.previous
    floor_s = min(f["seconds"] for f in floors)
    bandwidth = physical.write_bandwidth(128 if setup.quick else 512)
    write_s = floors[0]["float32_bytes"] / bandwidth["bytes_per_second"]
    section = {
        "seconds": floor_s, "all_seconds": [f["seconds"] for f in floors], "images": len(work),
        "transform_calls": sum(len(c) for c in work.values()), "pipeline_over_floor": best["seconds"] / floor_s,
        "float32_bytes": floors[0]["float32_bytes"], "write_bandwidth": bandwidth, "float32_write_seconds": write_s,
        "pipeline_over_floor_plus_write": best["seconds"] / (floor_s + write_s),
        "recorded_images": recorded_images,
        "pipeline_seconds_previous_path": min(previous), "all_seconds_previous_path": previous,
        "previous_path_over_floor": min(previous) / floor_s, "speedup_over_previous_path": min(previous) / best["seconds"],
    }  # fmt: skip
    section["identical_to_previous_path"] = physical.same_batches(setup.build, min(setup.batches, 2))
    return section


def _fast_decode_section(
    setup: _Setup, recorder: WorkRecorder, work: dict, fast_runs: list, best: dict, profiled: dict
) -> dict:
    """fast_decode on the JPEGs the packs held, and on JPEGs twice the target size; and the
    pipeline with it."""
    progress("fast_decode speed and pixel error")
    quick, repeats = setup.quick, setup.repeats
    jpegs = recorder.jpeg_work(work)[: 12 if quick else None]
    twice = fast.twice_target_items(list({id(t): t for _, c in jpegs for t, _ in c}.values()), 2 if quick else 6)
    return {
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


def _nested_mask_section(setup: _Setup, best: dict) -> dict:
    """The nested-mask mode (dense masks instead of split_lens / attn_modes): throughput,
    and each mask's build time against the image work of its sample."""
    progress("nested-mask mode")
    runs_nested = []
    warm_rebuild = None  # the same masks rebuilt in warm memory: the code's cost, not the VM's
    for _ in range(setup.repeats):
        with WorkRecorder() as recorder, StageProfiler(setup.tok) as profiler:
            run = _run_packs(setup.build(use_flex=False), setup.batches)
        runs_nested.append((run, profiler.seconds["mask"], recorder.mask_rows(run["packs"])))
        if warm_rebuild is None:
            warm_rebuild = mask_report([recorder.warm_mask_rows(run["packs"], rounds=setup.repeats)])
    fastest = min(runs_nested, key=lambda r: r[0]["seconds"])
    return {"tokens_per_second": fastest[0]["tokens_per_second"], "seconds": fastest[0]["seconds"],
            "all_seconds": [r[0]["seconds"] for r in runs_nested],
            "mask_build_seconds": min(r[1] for r in runs_nested),
            **mask_report([r[2] for r in runs_nested]), "warm_rebuild": warm_rebuild,
            "relative_to_flex": fastest[0]["tokens_per_second"] / best["tokens_per_second"]}  # fmt: skip


def _with_fast_decode(grouped_path: str) -> dict:
    """The grouped-datasets config with `fast_decode: true` in every image transform."""
    grouped = yaml.safe_load(Path(grouped_path).read_text())
    for group in grouped.values():
        for key in ("image_transform_args", "vit_image_transform_args"):
            if key in group:
                group[key]["fast_decode"] = True
    return grouped
