"""Running the benchmark's pipeline: building it, and runs in fresh interpreters.

`build` / `load_tokenizer_once` make the pipeline as every measurement uses it. The
DataLoader and JSONL-index measurements run in a fresh interpreter each (`run_child`), so
that their peak RSS is their own; `RssSampler` reads `/proc/<pid>/status` of a process and
its children (the DataLoader workers) every 50 ms.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

from bagel_data.datasets import make_bagel_multimodal_dataset
from bagel_data.tokenizer import add_special_tokens, load_tokenizer

from . import child_env, physical
from .progress import progress

_now = time.perf_counter


def load_tokenizer_once():
    tok, special, _ = add_special_tokens(load_tokenizer(None))
    tok.encode("warm up")  # builds the BPE tables once (about 1 s), outside every timing
    return tok, special


def build(paths: dict, tok, special, packing: dict, num_workers: int = 1, **override):
    return make_bagel_multimodal_dataset(
        tokenizer=tok, special_tokens=special, grouped_datasets=paths["grouped"], dataset_info=paths["info"],
        num_workers=num_workers, **{**packing, **override},
    )  # fmt: skip


# -- process memory ------------------------------------------------------------------------------
def process_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon of a process in bytes (empty if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return {}
    fields = (line.split(":", 1) for line in lines)
    return {k: int(v.split()[0]) * 1024 for k, v in fields if k in ("VmRSS", "VmHWM", "RssAnon")}


def reset_peak(pid: int | None = None) -> bool:
    try:  # "5" resets VmHWM to the current RSS (Linux >= 4.0)
        with open(f"/proc/{pid or os.getpid()}/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    return found


class RssSampler(threading.Thread):
    """Samples the peak RSS of a process and of its children (DataLoader workers) every 50 ms."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self._stop_event = pid, threading.Event()
        self.peaks: dict[int, dict[str, float]] = {}

    def sample(self) -> None:
        for pid in [self.pid, *_children(self.pid)]:
            status = process_status(pid)
            if status:
                old = self.peaks.get(pid, {})
                self.peaks[pid] = {k: max(v, old.get(k, 0)) for k, v in status.items()}

    def run(self) -> None:
        while not self._stop_event.wait(0.05):
            self.sample()

    def stop(self) -> dict:
        self._stop_event.set()
        self.join()
        self.sample()

        def mb(peaks: dict) -> dict:
            return {f"{k}_mb": round(v / 2**20, 1) for k, v in peaks.items()}

        return {"main": mb(self.peaks.get(self.pid, {})),
                "workers": [mb(v) for pid, v in sorted(self.peaks.items()) if pid != self.pid]}  # fmt: skip


# -- children: fresh interpreters for the loader and the JSONL index -------------------------------
def run_child(kind: str, args: dict) -> dict:
    code = "from bagel_bench.runs import child_main; child_main()"
    proc = subprocess.run([sys.executable, "-c", code, kind, json.dumps(args)], capture_output=True, text=True,
                          timeout=900, check=False, env=child_env())  # fmt: skip
    if proc.returncode:
        raise RuntimeError(f"benchmark child {kind} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_main() -> None:
    kind, args = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(_loader_child(**args) if kind == "loader" else _jsonl_child(**args)))


def _loader_child(paths: dict, packing: dict, workers: int, batches: int, warmup: int) -> dict:
    """`warmup + batches` batches through the loader; the steady rate is that of the last
    `batches` (each worker has then filled its packer's buffer and its batch buffers)."""
    from bagel_data.checkpoint.collect import worker_dataset_states
    from bagel_data.loader import build_dataloader

    tok, special = load_tokenizer_once()
    dataset = build(paths, tok, special, packing, num_workers=max(workers, 1))
    loader = build_dataloader(dataset, num_workers=workers)  # 0: one process, the same loader
    reset_peak()
    sampler = RssSampler(os.getpid())
    sampler.start()
    tokens, samples, first, start = 0, 0, 0.0, _now()
    window_tokens, window_start = 0, start
    iterator = iter(loader)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    for index in range(warmup + batches):
        batch = next(iterator)
        if index == 0:
            first = _now() - start
        if index == warmup - 1:
            window_start, usage = _now(), resource.getrusage(resource.RUSAGE_SELF)
        tokens += batch.sequence_length
        window_tokens += batch.sequence_length if index >= warmup else 0
        samples += len(batch.batch_data_indexes)
        del batch
    end, after = _now(), resource.getrusage(resource.RUSAGE_SELF)
    seconds = end - start
    # With workers, the main process only receives batches (and samples RSS): its CPU time
    # over the timed batches is the receiving side of moving them between processes.
    main_cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    memory = sampler.stop()
    states = worker_dataset_states(loader.state_dict())
    del iterator
    return {"workers": workers, "batches": warmup + batches, "warmup_batches": warmup, "tokens": tokens,
            "samples": samples, "seconds": seconds, "tokens_per_second": tokens / seconds,
            "samples_per_second": samples / seconds, "first_batch_seconds": first, "peak_rss": memory,
            "steady_tokens_per_second": window_tokens / max(end - window_start, 1e-9),
            "main_process_cpu_seconds": main_cpu, "main_process_cpu_share": main_cpu / max(end - window_start, 1e-9),
            "checkpoint_bytes": max(len(pickle.dumps(s)) for s in states)}  # fmt: skip


def _jsonl_child(path: str, lines: int) -> dict:
    from bagel_data.sources.jsonl import JsonlIndex, release_free_heap

    gc.collect()
    reset = reset_peak()
    before = process_status(os.getpid())["VmRSS"]
    start = _now()
    index = JsonlIndex([path], [os.path.dirname(path)], [lines])
    seconds = _now() - start
    peak = process_status(os.getpid())["VmHWM"]
    gc.collect()
    retained = process_status(os.getpid())["VmRSS"] - before
    release_free_heap()  # the build trims already; this shows whether anything was left
    trimmed = process_status(os.getpid())["VmRSS"] - before
    held = index.offsets.nbytes + index.line_numbers.nbytes + index.file_ids.nbytes
    return {"lines": len(index), "bytes_per_line": held / len(index), "build_seconds": seconds,
            "retained_rss_bytes_per_line": retained / len(index),
            "retained_after_malloc_trim_bytes_per_line": trimmed / len(index),
            "pickled_bytes_per_line": len(pickle.dumps(index)) / len(index),
            "peak_rss_delta_mb": (peak - before) / 2**20, "peak_reset_ok": reset,
            "file_mb": os.path.getsize(path) / 2**20}  # fmt: skip


def write_jsonl(path: Path, lines: int) -> Path:
    if path.exists() and sum(1 for _ in path.open("rb")) == lines:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    row = '{"id": "r%07d", "conversations": [{"from": "human", "value": "What is item %d?"}, {"from": "gpt", "value": "It is %d."}]}\n'
    with path.open("w") as out:
        for first in range(0, lines, 100_000):
            out.write("".join(row % (i, i, i * 7919 % 100_003) for i in range(first, min(lines, first + 100_000))))
    return path


def loader_scaling(
    paths: dict, packing: dict, batches: int, repeats: int, pipeline: dict, quick: bool, warmup_packs: int
) -> dict:
    """(c) Through the StatefulDataLoader with 0 (one process), 1, 2 and as many workers as
    the machine has cores, each run in a fresh interpreter, interleaved, each timed after
    `warmup_packs` batches per worker; K workers are compared with K x the 0-worker rate
    (with `quick`, no 0-worker run: the in-process pipeline's rate), and with the
    machine's `parallel_ceiling`."""
    counts = sorted({1, 2, os.cpu_count() or 1})
    loader: dict = {k: [] for k in ([] if quick else [0]) + counts}
    loader_batches = 2 * batches if quick else max(batches, 4) * 2
    for round_index in range(min(repeats, 2)):
        for workers, runs in loader.items():
            progress(f"DataLoader with {workers} worker(s), round {round_index + 1}")
            warmup = warmup_packs * max(workers, 1)  # as many per worker as the in-process run
            args = {"paths": paths, "packing": packing, "workers": workers, "batches": loader_batches, "warmup": warmup}
            runs.append(run_child("loader", args))
    result = {}
    for workers, runs in loader.items():
        run = max(runs, key=lambda r: r["steady_tokens_per_second"])
        run["all_steady_tokens_per_second"] = [r["steady_tokens_per_second"] for r in runs]
        result[f"workers_{workers}"] = run
    if "workers_0" in result:
        one = result["workers_0"]["steady_tokens_per_second"]
    else:  # the in-process run is timed after its warm-up packs too
        one = pipeline["tokens_per_second"]
    result["one_process_steady_tokens_per_second"] = one
    progress("the machine's parallel ceiling")
    ceiling = physical.parallel_ceiling(counts, rounds=10 if quick else 40)
    result["machine_ceiling"] = {str(k): v for k, v in ceiling.items()}
    for workers in counts:
        run = result[f"workers_{workers}"]
        run["scaling"] = run["steady_tokens_per_second"] / (workers * one)  # target >= 0.9 on free cores
        run["machine_ceiling"] = ceiling[workers]
    return result


# -- the benchmark -----------------------------------------------------------------------------------
