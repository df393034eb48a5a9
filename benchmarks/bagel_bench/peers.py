"""`bagel-data bench peers`: the read path side by side with Megatron-Energon and MosaicML
Streaming, on the same photos, from local disk and from an S3 store at a delay per round trip.

    bagel-data bench peers [--peers-python PY] [--tars 8] [--per-tar 48] [--rounds 3] [--out F]

The photos are written once as WebDataset tars (read by ours and by Energon, after Energon's
own index is built), our parquet (`prepare t2i`) and Streaming's MDS (a shard per tar). Each
loader decodes to RGB and resizes to 512 px and yields one sample at a time, in one process
(`--workers 0`) and through a DataLoader of 2 workers; samples per second after a warm-up,
for local disk and the S3 store (moto in a process of its own behind the delaying proxy) at
each `--delays-ms`. Cells alternate within a round; each ratio is taken within a round
(to the loader's own local rate, and ours to each peer) before its median.

The peers run under another Python (`--peers-python`, or `BAGEL_PEERS_PYTHON`): a virtual
environment holding them (docs/performance.md says how to make one), driven through
`peer_runner.py`, which imports nothing of ours. Without it they are skipped, with the reason.
`--shuffle` measures the shuffles instead (peers_shuffle.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from . import child_env
from .peer_calls import find_peers, peer
from .peers_report import LOADERS, summarize, table

BUCKET = "s3://bench-peers"
PEER_LOADERS = {"energon_tars": ("energon", "tars"), "streaming_mds": ("streaming", "mds")}


def prepare(root: Path, tars: int, per_tar: int, side: int, python: str | None) -> dict[str, Path]:
    """The same photos three ways (made once under `root`)."""
    from .tars import prepared_copy, write_tars

    tar_dir = write_tars(root / "tars", tars, per_tar, side)
    paths = {"tars": tar_dir, "parquet": prepared_copy(tar_dir, root / "parquet"), "mds": root / "mds"}
    if python is not None:
        if not (tar_dir / ".nv-meta" / "split.yaml").exists():
            peer(python, "energon-prepare", str(tar_dir))
        if not (paths["mds"] / "index.json").exists():
            peer(python, "write-mds", str(tar_dir), str(paths["mds"]))
    return paths


class _Samples(torch.utils.data.IterableDataset):
    """Our family's decoded samples as a DataLoader's iterable (the image's shape only crosses)."""

    def __init__(self, family, read_ahead: int):
        super().__init__()
        self.family, self.read_ahead = family, read_ahead

    def __iter__(self):
        for _, sample in self.family.iter_samples(read_ahead=self.read_ahead):
            yield tuple(sample["image_tensor_list"][0].shape)


def ours(path: str, units: int, workers: int, warmup: int, count: int) -> dict:
    """Our T2I family's samples (decoded, resized to 512 px) per second; on the store with the
    read-ahead a remote group gets by default."""
    from bagel_data.families.t2i import T2IIterableDataset
    from bagel_data.media.images import ImageTransform
    from bagel_data.schema.settings import READ_AHEAD_BYTES
    from bagel_data.tokenizer import QwenTokenizer

    family = T2IIterableDataset(
        "t2i", ImageTransform(512, 256, 16), QwenTokenizer(), [path], [units], num_workers=max(workers, 1)
    )
    samples = _Samples(family, READ_AHEAD_BYTES if "://" in path else 0)
    start = time.perf_counter()
    if workers:
        items = iter(torch.utils.data.DataLoader(samples, batch_size=None, num_workers=workers))
    else:
        items = iter(samples)
    next(items)
    first = time.perf_counter() - start
    for _ in range(warmup):
        next(items)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        next(items)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    del items  # its workers stop
    # CPU: this process's alone (with workers, the main process's share only, as for the peers)
    return {"samples_per_second": count / seconds, "main_cpu_seconds_per_sample": cpu_seconds / count,
            "first_sample_seconds": first}  # fmt: skip


def ours_in_child(path: str, units: int, workers: int, warmup: int, count: int, store) -> dict:
    """`ours` in a fresh interpreter, as each peer runs: a training process whose DataLoader
    forks its workers before it reads the store. (Forked after this process had read the
    store, a worker's S3 request stalled for the client's 60 s timeout: 1.5 samples/s.)"""
    endpoint = None if store is None else store.proxy.endpoint
    spec = json.dumps([path, units, workers, warmup, count, endpoint])
    done = subprocess.run(
        [sys.executable, "-m", "bagel_bench.peers", "--ours-cell", spec],
        capture_output=True, text=True, timeout=900, env=child_env(),
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"ours failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return json.loads(lines[-1])


def _ours_cell(spec: str) -> int:
    from bagel_data.sources import storage

    from .s3_proxy import proxy_storage_options

    path, units, workers, warmup, count, endpoint = json.loads(spec)
    if endpoint:
        storage.register_options(BUCKET, proxy_storage_options(endpoint))
    torch.set_num_threads(1)  # as the peers run, and as a DataLoader worker does
    print(json.dumps(ours(path, units, workers, warmup, count)), flush=True)
    return 0


def cell(loader, paths, where, store, python, workers, warmup, count, units) -> dict:
    """One loader at one storage: its rates and the requests it asked of the store."""
    if store is not None:
        store.proxy.counter.reset()
        store.bytes()
    if loader.startswith("ours"):
        form = "tars" if loader == "ours_tars" else "parquet"
        path = str(paths[form]) if store is None else f"{BUCKET}/{form}"
        # The one parquet file repeats to feed each worker, as `bench tars` does.
        got = ours_in_child(path, max(units[form], workers), workers, warmup, count, store)
    else:
        name, form = PEER_LOADERS[loader]
        path = str(paths[form]) if store is None else f"{BUCKET}/{form}"
        args = ["read", name, path, "--workers", str(workers), "--warmup", str(warmup), "--count", str(count)]
        if name == "energon":
            args += ["--window", "100", "--max-samples-per-sequence", "100"]
        if store is not None:
            args += ["--endpoint", store.proxy.endpoint]
        got = peer(python, *args)
    if store is not None:
        got["requests"] = sum(store.proxy.counter.reset().values())
        got["bytes"] = store.bytes()
    return got


def run(args) -> dict:
    from .store_process import store_process

    python, found = find_peers(args.peers_python)
    print("peers:", found, flush=True)
    loaders = [loader for loader in LOADERS if python is not None or loader.startswith("ours")]
    paths = prepare(args.root, args.tars, args.per_tar, args.photo_side, python)
    units = {"tars": args.tars, "parquet": len(list(paths["parquet"].glob("*.parquet")))}
    results: dict = {"config": {key: str(value) for key, value in vars(args).items()}, "peers": found, "rounds": []}
    with store_process(0.0) as store:
        from bagel_data.sources import storage

        for form, path in paths.items():
            if form in ("tars", "parquet") or python is not None:
                store.upload(path, f"{BUCKET}/{form}")
        storage.register_options(BUCKET, store.proxy.storage_options())
        for number in range(args.rounds):
            found_round: dict = {}
            for workers in args.workers:
                for delay in ["local", *args.delays_ms]:
                    for loader in loaders:
                        store.proxy.delay_s = 0.0 if delay == "local" else int(delay) / 1000
                        key = f"{loader} w{workers} {delay if delay == 'local' else f'+{delay}ms'}"
                        try:
                            got = cell(loader, paths, delay, None if delay == "local" else store, python,
                                       workers, args.warmup, args.count, units)  # fmt: skip
                        except Exception as error:  # one cell's failure is its figure, not the run's end
                            got = {"error": f"{type(error).__name__}: {error}"}
                        found_round[key] = got
                        print(f"round {number + 1} {key}: {got}", flush=True)
            results["rounds"].append(found_round)
    results["summary"] = summarize(results["rounds"], loaders, args.workers, args.delays_ms)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bagel-data bench peers", description=__doc__.splitlines()[0])
    parser.add_argument("--peers-python", default=None, help="a Python with megatron-energon and mosaicml-streaming")
    parser.add_argument("--shuffle", action="store_true", help="measure the shuffles instead (peers_shuffle.py)")
    parser.add_argument("--root", type=Path, default=Path("bench_peers"), help="where the data is made once")
    parser.add_argument("--tars", type=int, default=8)
    parser.add_argument("--per-tar", type=int, default=48)
    parser.add_argument("--photo-side", type=int, default=640, help="the photos' longer side, about")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--delays-ms", nargs="+", default=["20", "100"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=16)
    parser.add_argument("--count", type=int, default=96)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/peers.json"))
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--ours-cell"]:  # one of ours' cells, in the child `ours_in_child` starts
        return _ours_cell(argv[1])
    if "--shuffle" in argv:  # its options are peers_shuffle's own
        from .peers_shuffle import main as shuffle_main

        return shuffle_main([arg for arg in argv if arg != "--shuffle"])
    args = parser.parse_args(argv)
    results = run(args)
    print("samples/s, median (range) over the rounds; ratios are the median of each round's ratio")
    print("\n".join(table(results["summary"])))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
