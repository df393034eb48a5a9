"""`run_benchmark`: the packed pipeline measured against its physical floor.

Sections of the result (also written to `out_json`): the pipeline in one process, the
floor (the same images decoded + resized with Pillow alone; writing their float32 bytes once
at the measured bandwidth beside it) and pipeline / floor, a per-stage breakdown, the
cost of moving batches to shared memory, the DataLoader with 1 and 2 workers (throughput and peak RSS per process, each
in a fresh interpreter), the nested-mask mode, the checkpoint size, the JSONL index memory
and the opt-in `fast_decode`. Every ratio is against a baseline measured in the same run.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bagel_data.synthetic.dataset import DemoSizes, write_demo_dataset

from . import runs as running
from .in_process import measure_in_process
from .progress import progress
from .report import print_report

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
    "transfer",
)
_now = time.perf_counter


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


def default_paths(root: Path | None, out_json: Path | None, quick: bool) -> tuple[Path, Path]:
    """Where the dataset and the JSON go when not given: `bench_data` and
    `benchmarks/results.json` for a full run. With `quick`, nothing is written into the
    current folder or over the committed results: the small dataset is kept (made once) in
    the system's temporary folder and the JSON goes to a fresh temporary folder."""
    if quick:
        root = Path(root) if root is not None else Path(tempfile.gettempdir()) / "bagel-data-bench-quick"
        if out_json is None:
            out_json = Path(tempfile.mkdtemp(prefix="bagel-bench-quick-")) / "results.json"
        return root, Path(out_json)
    return Path(root or "bench_data"), Path(out_json or "benchmarks/results.json")


def run_benchmark(
    root: Path | None = None,
    out_json: Path | None = None,
    *,
    batches: int,
    quick: bool = False,
    warm_mb: int | None = None,
) -> dict:
    """Run every measurement on the benchmark dataset under `root`; write and return the results.

    `warm_mb` (default 3072, 256 with `quick`) is touched and freed first (`warm_memory`).
    Paths left None: see `default_paths`.
    """
    (root, out_json), started = default_paths(root, out_json, quick), _now()
    progress(f"dataset under {root} (generated on first use); results to {out_json}")
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
        res.update(measure_in_process(paths, packing, batches, repeats, quick))
    finally:
        torch.set_num_threads(threads)
    res["loader"] = running.loader_scaling(
        paths, packing, batches, repeats, res["pipeline"], quick, warmup_packs=res["pipeline"]["warmup_packs"]
    )
    lines = 10_000 if quick else 1_000_000
    jsonl = running.write_jsonl(root / "jsonl_index" / f"rows_{lines}.jsonl", lines)
    progress("JSONL index memory")
    res["jsonl_index"] = running.run_child("jsonl", {"path": str(jsonl), "lines": lines})
    res["total_seconds"] = _now() - started
    Path(out_json).parent.mkdir(parents=True, exist_ok=True)
    Path(out_json).write_text(json.dumps(res, indent=2, default=float))
    progress(f"done in {res['total_seconds']:.1f} s; results written to {out_json}")
    print_report(res)
    return res
