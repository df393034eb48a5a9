"""`bagel-data bench --remote`: the benchmark's T2I shards read from an S3 server on
loopback (moto) behind a proxy that adds a delay to each round trip and counts requests,
against the same shards on local disk.

For each storage (local; S3 with 0, 20 and 100 ms added per round trip) one worker (this
process, as a DataLoader worker runs) goes through three phases, with the requests of each
counted by kind:
- start-up: building the dataset and drawing its first pack;
- steady: the next `batches` packs (packs/s, requests per pack);
- resume: a new dataset from a checkpoint with a full buffer (`pack_strategy="best_fit"`,
  ~50 samples waiting) up to its first pack: each buffered sample is rebuilt from its file.
Every figure is also given against local disk, measured in the same run: the storages take
turns for a few rounds, and ratios are paired within a round. The store (moto and the
proxy) runs in a child process (store_process.py), so that its CPU is not the worker's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from bagel_data.schema import Settings
from bagel_data.sources import shared_listing
from bagel_data.synthetic.dataset import DemoSizes, write_demo_dataset

from .main import PACKING, QUICK_PACKING, default_paths
from .progress import progress
from .runs import build, load_tokenizer_once
from .s3_proxy import RequestCounter
from .store_process import RemoteCounter, store_process

DELAYS_MS = (0, 20, 100)
RESUME_BUFFER_SIZE = 60
BUCKET = "s3://bagel-bench-remote"
GROUP, DATASET = "t2i_pretrain", "t2i"
_now = time.perf_counter


def remote_packing(quick: bool) -> dict:
    """The settings every run of this benchmark builds with, local and remote alike: the one
    place to set a read-ahead (or any other setting) for all of them."""
    return dict(QUICK_PACKING if quick else PACKING)


def read_ahead_settings(packing: dict) -> dict:
    """The read-ahead settings in effect (any `Settings` field named `read_ahead*`: their
    value here, else their default), so the results say what ran; empty where none exists."""
    fields = {field.name: field for field in dataclasses.fields(Settings) if field.name.startswith("read_ahead")}
    return {name: packing.get(name, field.default) for name, field in fields.items()}


def t2i_config(grouped_path: Path, data_dir: str, storage_options: dict | None = None) -> dict:
    """grouped_datasets and dataset_info of the benchmark's T2I group alone, its shards in `data_dir`."""
    group = yaml.safe_load(Path(grouped_path).read_text())[GROUP]
    entry: dict = {"data_dir": data_dir}
    if storage_options:
        entry["storage_options"] = storage_options
    grouped = {GROUP: {**group, "weight": 1.0, "is_mandatory": True}}
    return {"grouped": grouped, "info": {GROUP: {DATASET: entry}}}


def measure_phases(make: Callable, counter: RequestCounter | RemoteCounter | None, batches: int) -> dict:
    """Start-up, steady and resume of one worker built by `make()`, each with its requests."""

    def requests() -> dict:
        return counter.reset() if counter is not None else {}

    requests()
    _new_launch()
    start = _now()
    dataset = make()
    stream = iter(dataset)
    next(stream)
    startup = {"seconds": _now() - start, "requests": requests()}
    start = _now()
    for _ in range(batches):
        next(stream)
    seconds = _now() - start
    counts = requests()
    steady = {"seconds": seconds, "packs": batches, "packs_per_second": batches / seconds, "requests": counts,
              "requests_per_pack": sum(counts.values()) / batches}  # fmt: skip
    stream.close()
    # Resume from a full buffer: best_fit draws until `max_buffer_size` samples wait, packs
    # some, and keeps the rest, each rebuilt from its file on resume (greedy rarely holds
    # any at a checkpoint). A pack takes ~10 of these images: 60 leaves ~50 waiting.
    resume_packing = {"pack_strategy": "best_fit", "max_buffer_size": RESUME_BUFFER_SIZE}
    filled = make(**resume_packing)
    stream = iter(filled)
    next(stream)
    state = filled.state_dict()
    stream.close()
    requests()  # filling the buffer is not a phase
    _new_launch()
    start = _now()
    resumed = make(**resume_packing)
    resumed.load_state_dict(state)
    next(iter(resumed))
    resume = {"seconds": _now() - start, "buffered_samples": len(state.get("buffer", ())), "requests": requests()}
    return {"startup": startup, "steady": steady, "resume": resume}


def _new_launch() -> None:
    """What follows starts as a new launch would (torchrun's run id, which keys the node's
    shared folder listings: sources/shared_listing.py): it lists the store afresh."""
    os.environ[shared_listing.RUN_ENV] = f"bench-remote-{os.getpid()}-{time.time_ns()}"


def run_remote_benchmark(
    root: Path | None = None,
    out_json: Path | None = None,
    *,
    batches: int,
    quick: bool = False,
    delays_ms=DELAYS_MS,
    rounds: int | None = None,
) -> dict:
    """Every storage's phases, written to `out_json` (paths left None: `main.default_paths`).

    The storages take turns, local first, for `rounds` rounds (default 3, quick 1): each
    figure is the median over the rounds, and each ratio the median of the ratios paired
    within a round, so that a burst of load on a shared machine moves both sides of one."""
    rounds = (1 if quick else 3) if rounds is None else rounds
    root, out_json = default_paths(root, out_json, quick)
    if out_json.name == "results.json" and not quick:
        out_json = out_json.with_name("remote.json")  # not over the main benchmark's results
    made = write_demo_dataset(root, DemoSizes.demo() if quick else DemoSizes.bench(), seed=0)
    packing = remote_packing(quick)
    tok, special = load_tokenizer_once()
    res: dict = {"config": {"root": str(root), "batches": batches, "quick": quick, "packing": packing,
                            "read_ahead": read_ahead_settings(packing), "delays_ms": list(delays_ms),
                            "rounds": rounds, "shards": len(list(made.t2i_dir.glob("*.parquet")))}}  # fmt: skip
    runs: dict[str, list[dict]] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one intra-op thread, as in a DataLoader worker
    launch = os.environ.get(shared_listing.RUN_ENV)
    try:
        local = t2i_config(made.grouped_datasets, str(made.t2i_dir))
        with store_process() as store:  # the store's CPU is not the worker's, as with a real one
            uri = f"{BUCKET}/t2i"
            store.upload(made.t2i_dir, uri)
            remote = t2i_config(made.grouped_datasets, uri, store.proxy.storage_options())
            for turn in range(rounds):
                progress(f"round {turn + 1}/{rounds}: local disk")
                runs.setdefault("local", []).append(
                    measure_phases(lambda **o: build(local, tok, special, packing, **o), None, batches)
                )
                for delay in delays_ms:
                    progress(f"round {turn + 1}/{rounds}: S3 on loopback, +{delay} ms per round trip")
                    store.proxy.delay_s = delay / 1000
                    runs.setdefault(f"s3_{delay}ms", []).append(
                        measure_phases(
                            lambda **o: build(remote, tok, special, packing, **o), store.proxy.counter, batches
                        )
                    )
    finally:
        torch.set_num_threads(threads)
        if launch is None:  # as it was: `_new_launch` set it per phase
            os.environ.pop(shared_listing.RUN_ENV, None)
        else:
            os.environ[shared_listing.RUN_ENV] = launch
    res.update({name: median_run(each) for name, each in runs.items()})
    res["against_local"] = against_local(runs)
    res["rounds"] = runs
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(res, indent=2, default=float))
    progress(f"results written to {out_json}")
    return res


_TIMED = (("startup", "seconds"), ("steady", "seconds"), ("steady", "packs_per_second"), ("resume", "seconds"))


def median_run(runs: list[dict]) -> dict:
    """The first round's phases (their request counts are the same in every round) with each
    timed figure the median over the rounds."""
    merged = {phase: dict(values) for phase, values in runs[0].items()}
    for phase, figure in _TIMED:
        merged[phase][figure] = statistics.median(run[phase][figure] for run in runs)
    return merged


def against_local(runs: dict[str, list[dict]]) -> dict:
    """Each remote storage's steady throughput as a share of local, and its start-up and
    resume time as a multiple of local's: the median of the ratios within each round."""
    ratios = {}
    for name, rounds in runs.items():
        if name.startswith("s3_"):
            paired = list(zip(rounds, runs["local"]))
            ratios[name] = {
                "steady_packs_per_second": statistics.median(
                    s3["steady"]["packs_per_second"] / local["steady"]["packs_per_second"] for s3, local in paired
                ),
                "startup_seconds": statistics.median(
                    s3["startup"]["seconds"] / local["startup"]["seconds"] for s3, local in paired
                ),
                "resume_seconds": statistics.median(
                    s3["resume"]["seconds"] / local["resume"]["seconds"] for s3, local in paired
                ),
            }
    return ratios


def print_remote_report(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"bagel-data bench --remote ({res['config']['shards']} T2I shards, one worker)")
    for column in ("storage", "start-up", "steady packs/s", "resume", "requests: start-up / per pack / resume"):
        table.add_column(column)
    for name, run in ((k, v) for k, v in res.items() if k == "local" or k.startswith("s3_")):
        ratio = res["against_local"].get(name)
        startup, steady, resume = run["startup"], run["steady"], run["resume"]
        table.add_row(
            name.replace("s3_", "S3 +").replace("ms", " ms"),
            f"{startup['seconds']:.2f} s" + (f" ({ratio['startup_seconds']:.1f}x)" if ratio else ""),
            f"{steady['packs_per_second']:.2f}" + (f" ({ratio['steady_packs_per_second']:.2f}x)" if ratio else ""),
            f"{resume['seconds']:.2f} s, {resume['buffered_samples']} buffered"
            + (f" ({ratio['resume_seconds']:.1f}x)" if ratio else ""),
            f"{_counts(startup['requests'])} / {steady['requests_per_pack']:.1f} / {_counts(resume['requests'])}",
        )
    Console().print(table)


def _counts(requests: dict) -> str:
    """Requests in all, and how many were listings (by kind in the JSON)."""
    return f"{sum(requests.values())} ({requests.get('GET list', 0)} list)"
