"""float32 against uint8 pixels (`pixel_format`), and the float write priced as the pipeline
does it.

* `write_costs`: the resized images of the measured packs (decoded and resized again, as
  the floor does, in chunks so the timed writes do not find them in the cache), written three
  ways into touched float32 / uint8 buffers: the physical part of the float output, a plain
  casting copy from the strided RGBX pixels into the batch layout (`cast_write`: what no
  float32 conversion can avoid); the pipeline's own writers (`conversion`: cast, divide,
  subtract, media/convert.py); and the uint8 writers of `pixel_format: uint8` (media/pixels.py).
  ViT images (transform stride = `vit_patch_size`) go to patch rows, the others to CHW slots.
* `summary`: tokens per second and per CPU second of each format, pipeline / floor (the
  floor: Pillow decode + resize of the same images, floor.py), and pipeline / (floor + cast
  write) for float32.
* `measure_formats`: all of it on one dataset builder: what `bench --config RUN.yaml` runs.
"""

from __future__ import annotations

import time

import torch

from bagel_data.media.convert import PendingPatches
from bagel_data.media.pixels import _write_chw, _write_patches

from . import approximate
from .floor import _decode, replay_floor
from .profiler import StageProfiler
from .progress import progress
from .recorder import WorkRecorder, load_source

FORMATS = ("float32", "uint8")
_CHUNK = 8  # images resized before their writes are timed: ~32 MB, more than the caches hold
_now = time.perf_counter


def _resized(recorder: WorkRecorder, work: dict):
    """(transform, resized PendingImage) of every call in `work`, `_CHUNK` at a time."""
    chunk: list = []
    video_cache: dict = {}
    for index, calls in work.items():
        image = _decode(load_source(recorder.images[index].source), video_cache)
        for call in sorted(calls):
            transform, img_num, _ = recorder.images[index].calls[call]
            chunk.append((transform, transform.prepare(image, img_num=img_num)))
            if len(chunk) == _CHUNK:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _cast_write(dest: torch.Tensor, pending, patch: int | None) -> None:
    source = torch.from_numpy(pending.packed_pixels() if patch else pending.pixels)
    if patch is None:
        for c in range(source.shape[2]):
            dest[c].copy_(source[:, :, c])
        return
    h, w, c = source.shape
    grid = dest.view(h // patch, w // patch, patch, patch, c)
    grid.copy_(source.view(h // patch, patch, w // patch, patch, c).permute(0, 2, 1, 3, 4))


def _one_pass(recorder: WorkRecorder, work: dict, vit_patch: int) -> dict:
    seconds = {"cast_write": 0.0, "conversion": 0.0, "uint8": 0.0}
    float_bytes, flat, raw = 0, torch.zeros(0), torch.zeros(0, dtype=torch.uint8)
    for chunk in _resized(recorder, work):
        for transform, pending in chunk:
            c, h, w = pending.shape
            if flat.numel() < c * h * w:  # touched before timing: writes, not page faults
                flat, raw = torch.zeros(2 * c * h * w), torch.zeros(2 * c * h * w, dtype=torch.uint8)
            patch = vit_patch if transform.stride == vit_patch else None
            shape = (h // patch * (w // patch), patch * patch * c) if patch else (c, h, w)
            dest, dest_raw = flat[: c * h * w].view(shape), raw[: c * h * w].view(shape).numpy()
            float_bytes += 4 * c * h * w
            start = _now()
            _cast_write(dest, pending, patch)
            middle = _now()
            PendingPatches(pending, patch).write_into(dest) if patch else pending.write_into(dest)
            end = _now()
            _write_patches(dest_raw, pending, patch) if patch else _write_chw(dest_raw, pending)
            seconds["cast_write"] += middle - start
            seconds["conversion"] += end - middle
            seconds["uint8"] += _now() - end
    return {**seconds, "float32_bytes": float_bytes}


def write_costs(recorder: WorkRecorder, work: dict, vit_patch: int, repeats: int) -> dict:
    """Best of `repeats` for each of the three writes (see the module docstring)."""
    passes = [_one_pass(recorder, work, vit_patch) for _ in range(repeats)]
    best = {key: min(p[key] for p in passes) for key in ("cast_write", "conversion", "uint8")}
    nbytes = passes[0]["float32_bytes"]
    return {
        **{f"{key}_seconds": value for key, value in best.items()},
        "float32_bytes": nbytes,
        "cast_write_bytes_per_second": nbytes / max(best["cast_write"], 1e-9),
        "conversion_over_cast_write": best["conversion"] / max(best["cast_write"], 1e-9),
        "uint8_over_conversion": best["uint8"] / max(best["conversion"], 1e-9),
    }


def pixel_bytes(dataset, packs: int = 2) -> dict:
    """Bytes of the pixel tensors and of every tensor in the first `packs` packs."""
    iterator, pixels, total = iter(dataset), 0, 0
    for _ in range(packs):
        batch = next(iterator)
        for key, value in batch.items():
            if isinstance(value, torch.Tensor):
                total += value.nbytes
                pixels += value.nbytes if key in ("padded_images", "packed_vit_tokens") else 0
    iterator.close()
    return {"pixel_bytes_per_pack": pixels / packs, "tensor_bytes_per_pack": total / packs}


def summary(runs: dict[str, list[dict]], floor_seconds: float, write: dict | None) -> dict:
    """Per format: best tokens/s and tokens per CPU second, pipeline / floor; uint8 / float32."""
    out: dict = {}
    for fmt, fmt_runs in runs.items():
        best = min(fmt_runs, key=lambda r: r["seconds"])
        out[fmt] = {
            "seconds": best["seconds"], "all_seconds": [r["seconds"] for r in fmt_runs],
            "tokens_per_second": best["tokens_per_second"],
            "tokens_per_cpu_second": max(r["tokens"] / max(r["cpu_seconds"], 1e-9) for r in fmt_runs),
            "pipeline_over_floor": best["seconds"] / floor_seconds,
        }  # fmt: skip
    if write is not None and "float32" in out:
        out["float32"]["pipeline_over_floor_plus_cast_write"] = out["float32"]["seconds"] / (
            floor_seconds + write["cast_write_seconds"]
        )
    if set(FORMATS) <= set(out):
        out["uint8_over_float32"] = {
            key: out["uint8"][key] / out["float32"][key] for key in ("tokens_per_second", "tokens_per_cpu_second")
        }
    out["floor_seconds"] = floor_seconds
    return out


def measure_formats(
    build, tokenizer, batches: int, warmup: int, repeats: int, vit_patch: int, run_packs, build_approximate=None
) -> dict:
    """Stage shares of each format (one profiled run each), then `repeats` interleaved rounds
    of float32, uint8 and the floor; the write costs and the pixel bytes per pack.
    `run_packs`: the in-process runner (`in_process._run_packs`), which uses this module too.
    `build_approximate`: a builder of the same data with the opt-in faster floor
    (approximate.py); its uint8 runs join the rounds, and its floor and PSNR are measured."""
    _run_packs = run_packs
    res: dict = {"stages": {}}
    with WorkRecorder() as recorder:
        for fmt in FORMATS:
            progress(f"profiled run, pixel_format {fmt}")
            profiler = StageProfiler()
            dataset = build(pixel_format=fmt)
            run = _run_packs(dataset, batches, warmup, window=profiler)
            res["stages"][fmt] = profiler.breakdown(run["seconds"])
            if fmt == "float32":  # the recorded transforms are this dataset's objects
                work, owners = recorder.work_of(run["packs"]), approximate.group_of_transforms(dataset)
    runs: dict[str, list[dict]] = {fmt: [] for fmt in FORMATS}
    floors, approximate_runs = [], []
    for index in range(repeats):
        progress(f"float32 / uint8 / floor, round {index + 1} of {repeats}")
        for fmt in FORMATS:
            runs[fmt].append(_run_packs(build(pixel_format=fmt), batches, warmup))
        floors.append(replay_floor(recorder, work)["seconds"])
        if build_approximate is not None:
            approximate_runs.append(_run_packs(build_approximate(pixel_format="uint8"), batches, warmup))
    progress("float writes: cast copy, conversion, uint8")
    res["write"] = write_costs(recorder, work, vit_patch, repeats)
    res["formats"] = summary(runs, min(floors), res["write"])
    res["formats"]["all_floor_seconds"] = floors
    for fmt in FORMATS:  # within one run: steadier than two runs apart on a busy machine
        stages = res["stages"][fmt]
        shares = stages["decode"]["share"] + stages["resize"]["share"]
        res["formats"][fmt]["profiled_pipeline_over_decode_resize"] = 1 / shares if shares else None
    res["pixel_bytes"] = {fmt: pixel_bytes(build(pixel_format=fmt)) for fmt in FORMATS}
    if build_approximate is not None:
        progress("the faster floor: bilinear + fast_decode, speed and PSNR per group")
        res["approximate"] = approximate_section(owners, recorder, work, repeats, approximate_runs, runs["uint8"])
    res["images"] = sum(len(calls) for calls in work.values())
    return res


def approximate_section(
    owners: dict, recorder: WorkRecorder, work: dict, repeats: int, runs: list, exact_runs: list
) -> dict:
    """The opt-in faster floor against the exact uint8 pipeline of the same rounds."""
    cpu = [max(r["tokens"] / max(r["cpu_seconds"], 1e-9) for r in group) for group in (runs, exact_runs)]
    return {
        "options": approximate.OPTIONS,
        "floor": approximate.floor_seconds(recorder, work, repeats),
        "pixel_error": approximate.pixel_error(recorder, work, owners),
        "uint8_tokens_per_cpu_second": cpu[0],
        "over_exact_uint8_per_cpu_second": cpu[0] / cpu[1],
        "same_packs_shape": [len(p) for p in runs[0]["packs"]] == [len(p) for p in exact_runs[0]["packs"]],
    }
