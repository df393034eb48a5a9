"""The benchmark's measurements in this process (`measure_in_process`).

One cold pack, one profiled and recorded run, then rounds that interleave the pipeline,
the floor (`floor.py`), the previous conversion path and `fast_decode`, so that each ratio
is taken within the same rounds; then the move to shared memory, `fast_decode` on the
recorded JPEGs and the nested-mask mode. `main.py` runs this beside the DataLoader and
JSONL measurements, each in a child interpreter (`runs.py`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import pickle
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bagel_data.batch import collate_wrapper

from . import fast, formats, physical
from . import runs as running
from .floor import replay_floor
from .mask_cost import mask_report
from .profiler import StageProfiler
from .progress import progress
from .recorder import WorkRecorder

_now = time.perf_counter


# Packs drawn before the timed window, so that it is measured in steady state: the packer's
# buffer holds samples and the batch buffers are in use, as through most of a training run.
# Without them every run pays the buffer fill and the first touch of its buffers, and the
# images decoded for samples still buffered at the end are timed but not in the floor.
WARMUP_PACKS = 4


def _run_packs(dataset, batches: int, warmup: int = 0, window: Any = None) -> dict:
    """Draw `warmup + batches` packs in this process (collated, as the loader would). The
    timed window is the last `batches` packs (`window`, a context manager, is entered for
    them only); `fresh_seconds` / `fresh_packs` are the first `batches` from the new iterator."""
    collate, packs, stamps, tokens = collate_wrapper(), [], [], []
    iterator = iter(dataset)
    start = window_start = _now()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with contextlib.ExitStack() as stack:
        for index in range(warmup + batches):
            if index == warmup:
                stack.enter_context(window if window is not None else contextlib.nullcontext())
                usage, window_start = resource.getrusage(resource.RUSAGE_SELF), _now()
            batch = collate([next(iterator)])
            stamps.append(_now() - start)
            tokens.append(batch.sequence_length)
            packs.append(batch.batch_data_indexes)
            del batch
        end, after = _now(), resource.getrusage(resource.RUSAGE_SELF)
    iterator.close()
    seconds, timed, timed_tokens = end - window_start, packs[warmup:], sum(tokens[warmup:])
    samples = sum(len(pack) for pack in timed)
    window_stamps = [t - (window_start - start) for t in stamps[warmup:]]
    return {
        "seconds": seconds, "first_batch_seconds": window_stamps[0], "tokens": timed_tokens,
        "samples": samples, "tokens_per_second": timed_tokens / seconds, "samples_per_second": samples / seconds,
        "pack_seconds": list(np.diff([0.0, *window_stamps])), "packs": timed, "warmup_packs": warmup,
        "page_faults": after.ru_minflt - usage.ru_minflt, "system_seconds": after.ru_stime - usage.ru_stime,
        "cpu_seconds": after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime,
        "fresh_seconds": stamps[batches - 1], "fresh_packs": packs[:batches],
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

    @property
    def warmup(self) -> int:
        return 1 if self.quick else WARMUP_PACKS

    def build(self, paths: dict | None = None, **override):
        """A fresh packed dataset of the benchmark's config (`paths`: another dataset's)."""
        return running.build(self.paths if paths is None else paths, self.tok, self.special, self.packing, **override)


@dataclasses.dataclass
class _Rounds:
    """The interleaved rounds' results: pipeline runs, floors, previous-path seconds, fast_decode runs."""

    runs: list = dataclasses.field(default_factory=list)
    floors: list = dataclasses.field(default_factory=list)
    fresh_floors: list = dataclasses.field(default_factory=list)  # of the first packs from a new iterator
    previous: list = dataclasses.field(default_factory=list)
    fast: list = dataclasses.field(default_factory=list)
    uint8: list = dataclasses.field(default_factory=list)  # pixel_format: uint8 runs
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
    profiler = StageProfiler()  # times the window only; the recorder sees every pack
    with WorkRecorder() as recorder:
        profiled = _run_packs(dataset, batches, setup.warmup, window=profiler)
    res["checkpoint"] = {"bytes": len(pickle.dumps(dataset.state_dict()))}
    res["stages"] = profiler.breakdown(profiled["seconds"])
    work = recorder.work_of(profiled["packs"])
    fresh_work = recorder.work_of(profiled["fresh_packs"])
    rounds = _interleaved_rounds(setup, recorder, work, fresh_work)
    res["process_peak_rss_mb"] = rounds.peak_rss_mb
    best = min(rounds.runs, key=lambda r: r["seconds"])
    res["pipeline"] = {k: v for k, v in best.items() if k not in ("packs", "fresh_packs")}
    res["pipeline"].update(deterministic=all(_plain(r["packs"]) == _plain(profiled["packs"]) for r in rounds.runs),
                           all_seconds=[r["seconds"] for r in rounds.runs], profiled_seconds=profiled["seconds"],
                           cold_first_batch_seconds=cold)  # fmt: skip
    res["floor"] = _floor_section(setup, rounds, best, work, fresh_work)
    progress("float writes as the pipeline does them: cast copy, conversion, uint8")
    vit_patch = setup.packing.get("vit_patch_size", 14)
    res["float32_write"] = formats.write_costs(recorder, work, vit_patch, 1 if setup.quick else 2)
    runs = {"float32": rounds.runs, "uint8": rounds.uint8}
    res["pixel_format"] = formats.summary(runs, res["floor"]["seconds"], res["float32_write"])
    progress("moving batches to shared memory")
    res["transfer"] = physical.measure_transfer(setup.build, batches)
    res["fast_decode"] = _fast_decode_section(setup, recorder, work, rounds.fast, best, profiled)
    del recorder, work, dataset
    res["nested_mask"] = _nested_mask_section(setup, best)
    return res


def _interleaved_rounds(setup: _Setup, recorder: WorkRecorder, work: dict, fresh_work: dict) -> _Rounds:
    """The pipeline, the floors (of the timed window's packs and of the first packs from a
    new iterator), the previous path and fast_decode, round after round, so that each ratio
    is taken within the same rounds."""
    fast_paths = {**setup.paths, "grouped": _with_fast_decode(setup.paths["grouped"])}
    rounds = _Rounds()
    for round_index in range(setup.repeats):
        progress(f"pipeline / floor / previous path / fast_decode / uint8, round {round_index + 1} of {setup.repeats}")
        gc.collect()
        running.reset_peak()
        rounds.runs.append(_run_packs(setup.build(), setup.batches, setup.warmup))
        if rounds.peak_rss_mb is None:
            rounds.peak_rss_mb = running.process_status(os.getpid()).get("VmHWM", 0) / 2**20
        rounds.floors.append(replay_floor(recorder, work))
        rounds.fresh_floors.append(replay_floor(recorder, fresh_work)["seconds"])
        with physical.previous_path():  # baseline: the conversion as it was before media/convert.py
            rounds.previous.append(_run_packs(setup.build(), setup.batches, setup.warmup)["seconds"])
        rounds.fast.append(_run_packs(setup.build(fast_paths), setup.batches, setup.warmup))  # fast_decode: true
        rounds.uint8.append(_run_packs(setup.build(pixel_format="uint8"), setup.batches, setup.warmup))
    return rounds


def _floor_section(setup: _Setup, rounds: _Rounds, best: dict, work: dict, fresh_work: dict) -> dict:
    """The floor against the pipeline's best run and the previous path, the float32 write
    beside it, and the same ratio for the first packs of a new iterator."""
    floors, previous = rounds.floors, rounds.previous
    floor_s = min(f["seconds"] for f in floors)
    section = {
        "seconds": floor_s, "all_seconds": [f["seconds"] for f in floors], "images": len(work),
        "transform_calls": sum(len(c) for c in work.values()), "pipeline_over_floor": best["seconds"] / floor_s,
        "float32_bytes": floors[0]["float32_bytes"],
        "pipeline_seconds_previous_path": min(previous), "all_seconds_previous_path": previous,
        "previous_path_over_floor": min(previous) / floor_s, "speedup_over_previous_path": min(previous) / best["seconds"],
    }  # fmt: skip
    fresh_pipeline, fresh_floor = min(r["fresh_seconds"] for r in rounds.runs), min(rounds.fresh_floors)
    section["fresh_start"] = {
        "pipeline_seconds": fresh_pipeline, "floor_seconds": fresh_floor, "images": len(fresh_work),
        "pipeline_over_floor": fresh_pipeline / fresh_floor,
        "all_pipeline_seconds": [r["fresh_seconds"] for r in rounds.runs], "all_floor_seconds": rounds.fresh_floors,
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
        "twice_target": fast.measure_fast_decode(twice, rounds=repeats),
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
        profiler = StageProfiler()
        with WorkRecorder() as recorder:
            run = _run_packs(setup.build(use_flex=False), setup.batches, setup.warmup, window=profiler)
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
