"""`bagel-data bench --scale`: start-up and memory as the data grows.

Two measurements, each point in a fresh interpreter so that its peak RSS is its own:

- parquet shards (10, 1,000, 5,000 local T2I shards of one small row each): the packed
  dataset's construction and its first pack, seconds and peak RSS;
- a JSONL file of 1e4, 1e5, 1e6 lines: the index built in memory (time, transient peak
  against the finished index's 16 bytes per line), built into a fresh node cache, mapped by a
  second process from that cache, 8 processes starting at once on a cold cache against one,
  and the VLM family's start-up (index, epoch order and first pack).

The children are small scripts that use only long-standing entry points (`JsonlIndex`,
`bench.runs.build`), so `measure_jsonl(..., src=OLD_TREE)` times an older checkout the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import child_env
from .progress import progress

SHARDS = (10, 1_000, 5_000)
LINES = (10_000, 100_000, 1_000_000)
QUICK_SHARDS, QUICK_LINES = (10, 200), (10_000, 50_000)
WORKERS = 8
_TRANSFORM = {"image_stride": 16, "max_image_size": 512, "min_image_size": 256}
_PACKING = {"expected_num_tokens": 4096, "max_num_tokens": 4608, "max_num_tokens_per_sample": 4096,
            "prefer_buffer_before": 2048, "max_buffer_size": 4, "vit_patch_size": 14,
            "max_num_patch_per_side": 70, "max_latent_size": 32}  # fmt: skip

# Prints {"seconds", "peak_rss_mb", "rss_mb", "lines"} of one JsonlIndex built in this process.
_INDEX_CHILD = """
import gc, json, os, sys, time
def status():
    with open(f"/proc/{os.getpid()}/status") as handle:
        fields = dict(line.split(":", 1) for line in handle.read().splitlines())
    return {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}
from bagel_data.sources.jsonl import JsonlIndex
path, lines, start_at = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
gc.collect()
with open(f"/proc/{os.getpid()}/clear_refs", "w") as handle:
    handle.write("5")
before = status()["VmRSS"]
late = time.time() > start_at  # started after the others had begun: its figure is too short
while time.time() < start_at:  # the processes of one start begin together
    time.sleep(0.001)
start = time.perf_counter()
index = JsonlIndex([path], [os.path.dirname(path)], [lines])
seconds = time.perf_counter() - start
after = status()
print(json.dumps({"seconds": seconds, "lines": len(index), "end": time.time(), "late": late,
                  "peak_rss_mb": (after["VmHWM"] - before) / 2**20, "rss_mb": (after["VmRSS"] - before) / 2**20}))
"""

# Prints {"construct_seconds", "first_pack_seconds", "peak_rss_mb"} of the packed dataset.
_PIPELINE_CHILD = """
import json, os, sys, time
from bagel_bench.runs import build, load_tokenizer_once, process_status, reset_peak
paths, packing = json.loads(sys.argv[1]), json.loads(sys.argv[2])
tok, special = load_tokenizer_once()
reset_peak()
before = process_status(os.getpid())["VmRSS"]
start = time.perf_counter()
dataset = build(paths, tok, special, packing, num_workers=1)
built = time.perf_counter()
next(iter(dataset))
done = time.perf_counter()
peak = process_status(os.getpid())["VmHWM"]
print(json.dumps({"construct_seconds": built - start, "first_pack_seconds": done - built,
                  "peak_rss_mb": (peak - before) / 2**20}))
"""


def _child(code: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)  # fmt: skip


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"benchmark child failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def _env(cache: str, src: str | None) -> dict:
    return {**child_env(src), "BAGEL_DATA_INDEX_CACHE": cache}


def _index_runs(path: str, lines: int, cache: str, src: str | None, processes: int = 1) -> list[dict]:
    # Late enough for every interpreter to have imported numpy, also on a busy machine.
    start_at = str(time.time() + 2.0 + 0.75 * processes)
    procs = [_child(_INDEX_CHILD, [path, str(lines), start_at], _env(cache, src)) for _ in range(processes)]
    runs = [_result(proc) for proc in procs]
    for run in runs:
        run["since_start"] = run["end"] - float(start_at)
    return runs


def write_jsonl(path: Path, lines: int) -> Path:
    from .runs import write_jsonl as write_rows

    return write_rows(path, lines)


def measure_jsonl(root: Path, counts: tuple[int, ...], src: str | None = None) -> dict:
    """The index at each line count; `src`: the source tree to time instead of this one."""
    result = {}
    for lines in counts:
        path = str(write_jsonl(root / f"rows_{lines}.jsonl", lines))
        progress(f"JSONL index, {lines:,} lines")
        steady_mb = 16 * lines / 2**20
        point: dict = {"file_mb": os.path.getsize(path) / 2**20, "steady_mb": steady_mb}
        memory = _index_runs(path, lines, "off", src)[0]
        point["in_memory"] = {**memory, "peak_over_steady": memory["peak_rss_mb"] / steady_mb,
                              "peak_over_file": memory["peak_rss_mb"] / point["file_mb"]}  # fmt: skip
        cache = tempfile.mkdtemp(prefix="bagel-scale-cache-", dir=root)
        try:
            point["cold_cache"] = _index_runs(path, lines, cache, src)[0]
            point["mapped_second_start"] = _index_runs(path, lines, cache, src)[0]
            point["vlm_start_mapped"] = _vlm_start(root, path, lines, src, cache)
            shutil.rmtree(cache)
            many = _index_runs(path, lines, cache, src, processes=WORKERS)
            slowest = max(run["since_start"] for run in many)
            point[f"cold_{WORKERS}_processes"] = {
                "slowest_seconds": slowest, "per_process_peak_rss_mb": [run["peak_rss_mb"] for run in many],
                "any_late": any(run["late"] for run in many),
                "over_one_process": slowest / max(point["cold_cache"]["seconds"], 1e-9),
            }  # fmt: skip
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        point["vlm_start"] = _vlm_start(root, path, lines, src)
        result[str(lines)] = point
    return result


def _vlm_start(root: Path, jsonl: str, lines: int, src: str | None, cache: str = "off") -> dict:
    """The packed dataset of one VLM group over the file: construction (index + epoch order)
    and first pack; with the index cache off, the build is counted, with a warm `cache`, not."""
    group = {"dataset_names": ["rows"], "image_transform_args": {**_TRANSFORM, "image_stride": 14,
             "max_pixels": 490 * 490}, "is_mandatory": True, "num_used_data": [lines], "weight": 1.0}  # fmt: skip
    info = {"vlm_sft": {"rows": {"data_dir": str(root), "jsonl_path": jsonl, "num_files": 1,
                                 "num_total_samples": lines}}}  # fmt: skip
    paths = _write_configs(root / f"vlm_{lines}", {"vlm_sft": group}, info)
    return _result(_child(_PIPELINE_CHILD, [json.dumps(paths), json.dumps(_PACKING)], _env(cache, src)))


def _write_configs(folder: Path, grouped: dict, info: dict) -> dict:
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "grouped.yaml").write_text(yaml.safe_dump(grouped))
    (folder / "info.yaml").write_text(yaml.safe_dump(info))
    return {"grouped": str(folder / "grouped.yaml"), "info": str(folder / "info.yaml")}


def write_shards(folder: Path, count: int) -> Path:
    """`count` T2I shards of one small row each (one written, the rest copied: same bytes)."""
    from PIL import Image

    from bagel_data.formats import T2I_SCHEMA
    from bagel_data.synthetic.images import encode_image

    if folder.is_dir() and len(list(folder.glob("*.parquet"))) == count:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    pixels = np.random.default_rng(0).integers(0, 255, (256, 256, 3), dtype=np.uint8)
    row = {"image": encode_image(Image.fromarray(pixels)), "captions": json.dumps({"c": "a small square"})}
    first = folder / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist([row], schema=T2I_SCHEMA), first)
    for number in range(1, count):
        shutil.copyfile(first, folder / f"part-{number:05d}.parquet")
    return folder


def measure_shards(root: Path, counts: tuple[int, ...], src: str | None = None) -> dict:
    result = {}
    for count in counts:
        progress(f"T2I start-up, {count:,} parquet shards")
        shards = write_shards(root / f"t2i_{count}", count)
        group = {"dataset_names": ["t2i"], "image_transform_args": _TRANSFORM, "is_mandatory": True,
                 "num_used_data": [count], "weight": 1.0}  # fmt: skip
        info = {"t2i_pretrain": {"t2i": {"data_dir": str(shards), "num_files": count, "num_total_samples": count}}}
        paths = _write_configs(root / f"t2i_{count}_config", {"t2i_pretrain": group}, info)
        result[str(count)] = _result(
            _child(_PIPELINE_CHILD, [json.dumps(paths), json.dumps(_PACKING)], _env("off", src))
        )
    return result


def run_scale(root: Path | None, out_json: Path | None, quick: bool = False) -> dict:
    """Both measurements; the results printed and written to `out_json`."""
    root = Path(root or Path(tempfile.gettempdir()) / "bagel-data-bench-scale")
    out_json = Path(out_json or Path(tempfile.mkdtemp(prefix="bagel-bench-scale-")) / "scale.json")
    root.mkdir(parents=True, exist_ok=True)
    res = {"config": {"root": str(root), "quick": quick, "cpus": os.cpu_count(), "workers": WORKERS}}
    res["shards"] = measure_shards(root, QUICK_SHARDS if quick else SHARDS)
    res["jsonl"] = measure_jsonl(root, QUICK_LINES if quick else LINES)
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(res, indent=2, default=float))
    print_scale(res)
    progress(f"results written to {out_json}")
    return res


def print_scale(res: dict) -> None:
    print("parquet shards  construct s  first pack s  peak RSS MB")
    for count, run in res["shards"].items():
        print(
            f"{count:>14}  {run['construct_seconds']:11.2f}  {run['first_pack_seconds']:12.2f}  {run['peak_rss_mb']:11.1f}"
        )
    print("JSONL lines  build s  peak MB  steady MB  peak/steady  cached s  mapped s  "
          f"{WORKERS} procs / 1  VLM start s  (mapped)")  # fmt: skip
    for lines, p in res["jsonl"].items():
        memory, many = p["in_memory"], p[f"cold_{WORKERS}_processes"]
        vlm, mapped = (
            p[k]["construct_seconds"] + p[k]["first_pack_seconds"] for k in ("vlm_start", "vlm_start_mapped")
        )
        print(f"{lines:>11}  {memory['seconds']:7.2f}  {memory['peak_rss_mb']:7.1f}  {p['steady_mb']:9.1f}  "
              f"{memory['peak_over_steady']:11.2f}  {p['cold_cache']['seconds']:8.2f}  "
              f"{p['mapped_second_start']['seconds']:8.3f}  {many['over_one_process']:13.2f}  {vlm:11.2f}  {mapped:8.2f}")  # fmt: skip
