"""Start-up to the first pack on remote WebDataset tars: what a training launch waits for.

    python -m bagel_bench.startup [--tars 1000] [--delays 0.02 0.1] [--ranks 8] [--out startup.json]

Writes `--tars` tars (once, under `--root`), puts them in an S3 server on loopback (moto)
behind a proxy that counts requests and bytes and adds a fixed delay to each round trip,
then, for each delay, runs in fresh processes (so no client, listing or index is warm):

- `one rank`: build the packed dataset through `make_bagel_multimodal_dataset` (the
  dataset_info `storage_options` send it through the proxy), take the first pack and write
  the checkpoint's state (what a training loop does at its first save);
- `resume`: a new process loads that state and takes its first pack;
- `N ranks at once`: N processes, rank r of N, started together, each to its first pack.

Each phase is one launch on one node: its processes share a run id (`TORCHELASTIC_RUN_ID`,
as torchrun sets it) and the node cache, so a folder's listing is taken once per phase
(`listings_per_node`) and shared by its processes (sources/shared_listing.py).

Each phase reports the requests by kind, the bytes the store sent, and seconds: a process's
own from construction to its first pack, and for the ranks the wall time from the launch
of the first to the first pack of the last (imports included: what a launch waits for).
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

from bagel_data.sources import shared_listing

from .moto_store import moto_store
from .tars import write_tars

BUCKET = "s3://bench-startup"
GROUPED = {
    "t2i_pretrain": {
        "dataset_names": ["t2i"],
        "weight": 1.0,
        "is_mandatory": True,
        "image_transform_args": {"image_stride": 16, "max_image_size": 256, "min_image_size": 128},
    }
}
PACKING = {"expected_num_tokens": 2048, "max_num_tokens": 2560, "max_num_tokens_per_sample": 1024,
           "prefer_buffer_before": 1024}  # fmt: skip


def child(args: argparse.Namespace) -> dict:
    """One process of a phase: build, first pack, and (`--save`) the state, or (`--load`) a
    resume from it. Prints and returns its own figures."""
    import torch

    from bagel_data import make_bagel_multimodal_dataset
    from bagel_data.tokenizer import QwenTokenizer

    torch.set_num_threads(1)
    special = {"bos_token_id": 151644, "eos_token_id": 151645, "start_of_image": 151652, "end_of_image": 151653}
    options = json.loads(args.storage_options)
    grouped = {name: {**group, "num_used_data": [args.tars]} for name, group in GROUPED.items()}
    start = time.perf_counter()
    dataset = make_bagel_multimodal_dataset(
        tokenizer=QwenTokenizer(), special_tokens=special, grouped_datasets=grouped,
        dataset_info={"t2i_pretrain": {"t2i": {"data_dir": f"{BUCKET}/tars", "storage_options": options}}},
        local_rank=args.rank, world_size=args.world_size, num_workers=1, **PACKING,
    )  # fmt: skip
    if args.load:
        dataset.load_state_dict(torch.load(args.load, weights_only=False))
    next(iter(dataset))
    first_pack = time.perf_counter() - start
    if args.save:
        torch.save(dataset.state_dict(), args.save)
    figures = {"seconds_to_first_pack": first_pack, "seconds_with_state": time.perf_counter() - start}
    print(json.dumps(figures), flush=True)
    return figures


def _command(store, tars: int, rank: int = 0, world_size: int = 1, save: str = "", load: str = "") -> list[str]:
    options = json.dumps(store.proxy.storage_options())
    return [sys.executable, "-m", "bagel_bench.startup", "--child", "--tars", str(tars), "--rank", str(rank),
            "--world-size", str(world_size), "--storage-options", options, "--save", save, "--load", load]  # fmt: skip


def _phase(store, commands: list[list[str]]) -> dict:
    """Run `commands` at once, as one launch of one node (one run id, as torchrun gives
    its ranks: the folder's listing is shared among them, not with another phase); their
    requests, bytes and figures."""
    store.proxy.counter.reset()
    store.proxy.counter.reset_bytes()
    env = {**os.environ, shared_listing.RUN_ENV: f"bench-startup-{os.getpid()}-{time.time_ns()}"}
    launch = time.perf_counter()
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) for command in commands]
    outputs = [process.communicate()[0] for process in processes]
    wall = time.perf_counter() - launch
    if any(process.returncode for process in processes):
        raise RuntimeError(f"a start-up process failed: {[p.returncode for p in processes]}")
    figures = [json.loads(output.strip().splitlines()[-1]) for output in outputs]
    requests = store.proxy.counter.reset()
    return {
        "processes": len(commands),
        "requests": requests,
        "requests_total": sum(requests.values()),
        "requests_per_process": sum(requests.values()) / len(commands),
        "listings_per_node": requests.get("GET list", 0),  # every process on this one node
        "bytes_sent": store.proxy.counter.reset_bytes(),
        "seconds_to_first_pack": max(figure["seconds_to_first_pack"] for figure in figures),
        "seconds_to_first_pack_median": statistics.median(figure["seconds_to_first_pack"] for figure in figures),
        "wall_seconds_launch_to_last_first_pack": wall,
    }


def run(root: Path, tars: int, per_tar: int, side: int, delays: list[float], ranks: int) -> dict:
    folder = write_tars(root / f"startup_tars_{tars}x{per_tar}", tars, per_tar, side)
    state = root / "startup_state.pt"
    results: dict = {"config": {"tars": tars, "per_tar": per_tar, "photo_side": side, "ranks": ranks,
                                "tar_bytes": (folder / "00000.tar").stat().st_size}}  # fmt: skip
    with moto_store() as store:
        store.upload(folder, f"{BUCKET}/tars")
        for delay in delays:
            store.proxy.delay_s = delay
            label = f"+{delay * 1000:.0f}ms"
            one = _phase(store, [_command(store, tars, save=str(state))])
            resume = _phase(store, [_command(store, tars, load=str(state))])
            many = _phase(store, [_command(store, tars, rank, ranks) for rank in range(ranks)])
            results[label] = {"one_rank": one, "resume": resume, f"{ranks}_ranks_at_once": many}
            for phase, got in results[label].items():
                print(f"{label} {phase}: {got['requests_total']} requests ({got['requests_per_process']:.0f} per "
                      f"process, {got['listings_per_node']} listings), {got['bytes_sent'] / 2**20:.1f} MiB, first pack after "
                      f"{got['seconds_to_first_pack']:.2f} s (launch to last: "
                      f"{got['wall_seconds_launch_to_last_first_pack']:.1f} s)", flush=True)  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("bench_data"), help="where the tars are written")
    parser.add_argument("--tars", type=int, default=1000)
    parser.add_argument("--per-tar", type=int, default=8)
    parser.add_argument("--photo-side", type=int, default=320, help="the photos' longer side, about")
    parser.add_argument("--delays", type=float, nargs="+", default=[0.02, 0.1], help="seconds per round trip")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--world-size", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--storage-options", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--save", default="", help=argparse.SUPPRESS)
    parser.add_argument("--load", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    results = run(args.root, args.tars, args.per_tar, args.photo_side, args.delays, args.ranks)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
