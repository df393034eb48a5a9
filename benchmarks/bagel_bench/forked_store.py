"""DataLoader workers forked from a process that is reading an object store: do they read
their own bytes?

    python -m bagel_bench.forked_store [--tars 8] [--workers 2] [--out forks.json]

Writes `--tars` WebDataset tars of photo-like JPEGs with captions (once, under `--root`),
puts them in an S3 server (moto, in a process of its own) behind the counting proxy, and
in a fresh node cache: this process streams packs from them (its read-ahead threads
fetching), then builds a DataLoader of `--workers` workers over the same store, which fork
from it while those threads read, takes `--packs` packs through it, and takes more packs of
its own stream. Every sample is well formed, so any skip (`caption_not_json`,
`image_decode_failed`, `unit_unreadable`, ...) is a read that returned another request's
bytes or failed. Reports the skips by reason over the workers, the samples, the requests
and the seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from .store_process import store_process
from .tars import dataset, fresh_index_cache, write_tars

# A bucket of its own: a process keeps one set of storage options per bucket, and `bench tars`
# registers its store's under its own.
BUCKET = "s3://bench-forks"


def run(root: Path, tars: int, per_tar: int, workers: int, packs: int, delay: float) -> dict:
    from bagel_data.loader import build_dataloader, merged_stats
    from bagel_data.schema.settings import READ_AHEAD_BYTES
    from bagel_data.sources import storage

    folder = write_tars(root / "tars", tars, per_tar, 160)
    uri = f"{BUCKET}/forks"
    with fresh_index_cache(), store_process(delay) as store:
        store.upload(folder, uri)
        storage.register_options(BUCKET, store.proxy.storage_options())
        store.proxy.counter.reset()
        parent = iter(dataset(uri, tars, 128, READ_AHEAD_BYTES))
        for _ in range(3):  # its read-ahead threads are fetching when the workers fork
            next(parent)
        start = time.perf_counter()
        loader = build_dataloader(dataset(uri, tars, 128, READ_AHEAD_BYTES, workers), num_workers=workers)
        batches = iter(loader)
        for _ in range(packs):
            next(batches)
        seconds = time.perf_counter() - start
        for _ in range(3):  # and the parent goes on reading after the fork
            next(parent)
        stats = merged_stats(loader)
        del batches  # its workers stop
        parent.close()
        requests = store.proxy.counter.reset()
    skips = {reason: count for group in stats["skips"].values() for reason, count in group.items()}
    return {
        "config": {"tars": tars, "per_tar": per_tar, "workers": workers, "packs": packs, "delay_seconds": delay},
        "worker_samples": sum(stats["samples"].values()),
        "worker_skips": skips,
        "worker_skips_total": sum(skips.values()),
        "seconds_to_worker_packs": seconds,
        "requests": requests,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("bench_forks"), help="where the tars are written")
    parser.add_argument("--tars", type=int, default=8)
    parser.add_argument("--per-tar", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--packs", type=int, default=6)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds added to each request")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    results = run(args.root, args.tars, args.per_tar, args.workers, args.packs, args.delay)
    print(json.dumps(results, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
