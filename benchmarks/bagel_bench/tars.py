"""WebDataset tars read in place against the same samples after `prepare t2i`, and in place
at a round-trip delay per open and read (`bench/slow_reads.py`) against local disk.

    python -m bagel_bench.tars [--root bench_tars] [--rounds 3] [--out benchmarks/tars.json]

Writes `--tars` tars of `--per-tar` photo-like JPEGs with `.txt` captions (once, under
`--root`), prepares them with `prepare t2i`, then measures steady packs per second of one
stream (one DataLoader worker's work, in this process) for each case, the cases interleaved
round by round; each figure is the median over the rounds, and each ratio is taken within a
round before its median. The tar indexes are built in a fresh index cache before the rounds
(their cost is reported apart: `index_build`). The delay stands for an object store's round
trip; it is paid by every open and read through `storage.open_input`, not by the content
digest that keys a local tar's index cache. `--store` adds the case a user of an object
store sees: the tars in an S3 server (moto, in a process of its own) behind a proxy adding
`--delay` to every request the path makes (the index cache's identity, every open, HEAD and
ranged GET), with the requests per pack it asked.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import statistics
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from bagel_data.assembly import build_packed_dataset
from bagel_data.schema.settings import READ_AHEAD_BYTES, Settings
from bagel_data.synthetic.images import encode_image, photo_like_image
from bagel_data.tokenizer import QwenTokenizer

from .slow_reads import delayed_storage
from .store_process import store_process

SPECIAL = {"bos_token_id": 151644, "eos_token_id": 151645, "start_of_image": 151652, "end_of_image": 151653}
PACKING: dict = {"expected_num_tokens": 16384, "max_num_tokens": 18432, "max_num_tokens_per_sample": 8192,
                 "prefer_buffer_before": 8192, "max_buffer_size": 50, "max_latent_size": 64}  # fmt: skip
CASES = ("prepared", "tars", "tars+delay")
STORE_CASE = "tars+store"
BUCKET = "s3://bench-tars"
READ_PASSES = 4


def write_tars(folder: Path, tars: int, per_tar: int, side: int) -> Path:
    """The tars (made once): 32 distinct photos cycled, captions `tar T sample S`."""
    if folder.is_dir() and len(list(folder.glob("*.tar"))) == tars:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    photos = [encode_image(photo_like_image(rng, side + 16 * (i % 5), side - 8 * (i % 3))) for i in range(32)]
    for tar in range(tars):
        with tarfile.open(folder / f"{tar:05d}.tar", "w") as archive:
            for sample in range(per_tar):
                key = f"{tar:05d}/{sample:05d}"
                for ext, data in (
                    (".jpg", photos[(tar * per_tar + sample) % 32]),
                    (".txt", f"tar {tar} sample {sample}".encode()),
                ):
                    info = tarfile.TarInfo(key + ext)
                    info.size = len(data)
                    archive.addfile(info, _Bytes(data))
    return folder


class _Bytes:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def read(self, size: int = -1) -> bytes:
        part = self.data[self.at :] if size < 0 else self.data[self.at : self.at + size]
        self.at += len(part)
        return part


def prepared_copy(tars: Path, out: Path) -> Path:
    from bagel_data.tools.prepare.sharded import prepare_sharded

    if not out.is_dir():
        prepare_sharded("t2i", tars, out)  # prepare's defaults: row groups of 100 rows
    return out


def dataset(data_dir: Path | str, units: int, size: int, read_ahead: int, workers: int = 1):
    grouped = {"t2i_pretrain": {
        "dataset_names": ["t2i"], "num_used_data": [units], "weight": 1.0,
        "image_transform_args": {"image_stride": 16, "max_image_size": size, "min_image_size": size // 2},
    }}  # fmt: skip
    info = {"t2i_pretrain": {"t2i": {"data_dir": str(data_dir)}}}
    config = Settings(**PACKING, read_ahead_bytes=read_ahead)
    return build_packed_dataset(
        QwenTokenizer(), SPECIAL, grouped, info, config, local_rank=0, world_size=1, num_workers=workers
    )


def steady(
    data_dir: Path | str, units: int, size: int, delay: float, warmup: int, packs: int, workers: int = 1
) -> dict:
    """Packs per second after `warmup` packs, with the read-ahead a remote store gets by
    default (the delayed storage stands in for one, on local paths). `workers` > 1: through
    a DataLoader of that many workers (CPU seconds are then this process's alone)."""
    if workers > 1:
        return _steady_workers(data_dir, units, size, delay, warmup, packs, workers)
    with delayed_storage(delay):
        packed = dataset(data_dir, units, size, READ_AHEAD_BYTES)
        stream = iter(packed)
        for _ in range(warmup):
            next(stream)
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(packs):
            next(stream)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        stats = packed.stats["read_ahead"].get("t2i_pretrain")
        stream.close()
    return {"packs_per_second": packs / seconds, "packs_per_cpu_second": packs / cpu_seconds, "read_ahead": stats}


def _steady_workers(data_dir, units: int, size: int, delay: float, warmup: int, packs: int, workers: int) -> dict:
    from bagel_data.loader import build_dataloader

    with delayed_storage(delay):
        loader = build_dataloader(dataset(data_dir, units, size, READ_AHEAD_BYTES, workers), num_workers=workers)
        batches = iter(loader)
        for _ in range(warmup):
            next(batches)
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(packs):
            next(batches)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        del batches  # its workers stop
    return {"packs_per_second": packs / seconds, "packs_per_cpu_second": packs / max(cpu_seconds, 1e-9),
            "read_ahead": None, "workers": workers}  # fmt: skip


def read_path(data_dir: Path | str, units: int, delay: float) -> dict:
    """`READ_PASSES` passes of the family's reads alone (a unit's rows as cells: no decoding), with the
    default read-ahead following the stream: the side the two routes and the delay change."""
    from bagel_data.families.t2i import T2IIterableDataset
    from bagel_data.families.walk import phase_items
    from bagel_data.media.images import ImageTransform

    with delayed_storage(delay):
        family = T2IIterableDataset("t2i", ImageTransform(512, 256, 16), QwenTokenizer(), [str(data_dir)], [units],
                                    num_workers=1)  # fmt: skip
        family.units.walk_by_rows = False  # whole units, as the tars are walked: the same reads on both routes
        shard, log = family.worker_shard(), family.new_skip_log()
        stop = family.follow_stream(READ_AHEAD_BYTES, shard, 0, None)
        start, cpu, samples = time.perf_counter(), time.process_time(), 0
        for phase in range(READ_PASSES):
            for item in phase_items(shard, None, phase, None):
                samples += sum(1 for _ in family._located_rows(family.epoch_units[item.unit_id], None, log))
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        stop()
    return {
        "samples": samples,
        "samples_per_second": samples / seconds,
        "samples_per_cpu_second": samples / cpu_seconds,
    }


@contextlib.contextmanager
def fresh_index_cache() -> Iterator[None]:
    """An empty index cache for the block's duration (the environment put back after)."""
    from bagel_data.sources.jsonl_cache import ENV

    previous = os.environ.get(ENV)
    with tempfile.TemporaryDirectory() as cache:
        os.environ[ENV] = cache
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = previous


def index_build(tars: Path | str, delay: float, store=None) -> dict:
    """Seconds to list one tar into a fresh index cache (the first open on a node), then to
    map it again (a warm node cache); on the store, the requests each costs per tar."""
    from bagel_data.sources import storage
    from bagel_data.sources.tar_index import TarIndex

    if isinstance(tars, Path):
        paths, size = [str(path) for path in sorted(tars.glob("*.tar"))], sorted(tars.glob("*.tar"))[0].stat().st_size
    else:
        entries = [entry for entry in storage.list_entries(tars) if entry[0].endswith(".tar")]
        paths, size = [storage.join(tars, entry[0]) for entry in entries], entries[0][1]
        listed = {storage.join(tars, name): (nbytes, mtime) for name, nbytes, mtime in entries}
    # An older release's TarIndex takes no listing (for a before/after run of this bench).
    takes_listing = "listed" in inspect.signature(TarIndex).parameters
    found: dict = {"tar_bytes": size}
    with fresh_index_cache(), delayed_storage(delay):
        for phase in ("cold", "mapped"):
            if store is not None:
                store.proxy.counter.reset()
            start = time.perf_counter()
            for path in paths:
                TarIndex(path, listed[path]) if store is not None and takes_listing else TarIndex(path)
            found[f"{phase}_seconds_per_tar"] = (time.perf_counter() - start) / len(paths)
            if store is not None:
                found[f"{phase}_requests_per_tar"] = sum(store.proxy.counter.reset().values()) / len(paths)
    return found


def run(
    root: Path,
    tars: int,
    per_tar: int,
    side: int,
    size: int,
    delay: float,
    rounds: int,
    warmup: int,
    packs: int,
    use_store: bool = False,
    workers: int = 1,
) -> dict:
    tar_dir = write_tars(root / "tars", tars, per_tar, side)
    copy = prepared_copy(tar_dir, root / "prepared")
    results: dict = {"config": {"tars": tars, "per_tar": per_tar, "photo_side": side, "max_image_size": size,
                                "delay_seconds": delay, "rounds": rounds, "warmup_packs": warmup, "packs": packs,
                                "prepared_files": len(list(copy.glob("*.parquet"))), "store": use_store,
                                "workers": workers}}  # fmt: skip
    results["index_build"] = {"local": index_build(tar_dir, 0.0), f"+{delay * 1000:.0f}ms": index_build(tar_dir, delay)}
    cases = CASES + ((STORE_CASE,) if use_store else ())
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(store_process(delay)) if use_store else None
        if store is not None:
            from bagel_data.sources import storage

            store.upload(tar_dir, f"{BUCKET}/tars")
            storage.register_options(BUCKET, store.proxy.storage_options())
            results["index_build"][f"store +{delay * 1000:.0f}ms"] = index_build(f"{BUCKET}/tars", 0.0, store)
        runs = _rounds(cases, tar_dir, copy, tars, size, delay, rounds, warmup, packs, store, workers)
    for figure in (
        "packs_per_second",
        "packs_per_cpu_second",
        "reads_samples_per_second",
        "reads_samples_per_cpu_second",
    ):
        rate = {case: [_figure(run, figure) for run in runs[case]] for case in cases}
        results[figure] = {case: statistics.median(values) for case, values in rate.items()}
        results[f"{figure}_tars_vs_prepared"] = statistics.median(t / p for t, p in zip(rate["tars"], rate["prepared"]))
        results[f"{figure}_delay_vs_local"] = statistics.median(d / t for d, t in zip(rate["tars+delay"], rate["tars"]))
        if use_store:
            results[f"{figure}_store_vs_local"] = statistics.median(
                d / t for d, t in zip(rate[STORE_CASE], rate["tars"])
            )
    results["rounds"] = runs
    return results


def _rounds(cases, tar_dir, copy, tars, size, delay, rounds, warmup, packs, store, workers) -> dict[str, list[dict]]:
    """Each case once per round, in a fresh index cache built before the rounds' first use."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a DataLoader worker
    runs: dict[str, list[dict]] = {case: [] for case in cases}
    try:
        with fresh_index_cache():
            for number in range(rounds):
                for case in cases:
                    folder: Path | str = (copy, tar_dir, tar_dir, f"{BUCKET}/tars")[
                        ("prepared", "tars", "tars+delay", STORE_CASE).index(case)
                    ]
                    units = workers if case == "prepared" else tars  # the one file repeats to feed each worker
                    wait = delay if case == "tars+delay" else 0.0
                    if store is not None:
                        store.proxy.counter.reset()
                    got = steady(folder, units, size, wait, warmup, packs, workers)
                    if store is not None and case == STORE_CASE:
                        got["requests"] = store.proxy.counter.reset()
                    got["reads"] = read_path(folder, units, wait)
                    runs[case].append(got)
                    print(f"round {number + 1} {case}: {got['packs_per_second']:.2f} packs/s, "
                          f"{got['packs_per_cpu_second']:.2f} packs/CPU s, reads alone "
                          f"{got['reads']['samples_per_second']:.0f} samples/s", flush=True)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    return runs


def _figure(run: dict, figure: str) -> float:
    return run["reads"][figure.removeprefix("reads_")] if figure.startswith("reads_") else run[figure]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("bench_tars"), help="where the tars and their copy live")
    parser.add_argument("--tars", type=int, default=4)
    parser.add_argument("--per-tar", type=int, default=96)
    parser.add_argument("--photo-side", type=int, default=512, help="the photos' longer side, about")
    parser.add_argument("--max-image-size", type=int, default=512, help="the VAE transform's largest side")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per round trip")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--packs", type=int, default=8)
    parser.add_argument("--store", action="store_true", help="add the tars in an S3 server (moto) at --delay")
    parser.add_argument(
        "--digest-identity",
        action="store_true",
        help="key a store tar's cached index by a content digest, not its listing (tar_index.LISTED_IDENTITY off)",
    )
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers for the packs (1: in process)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.digest_identity:
        from bagel_data.sources import tar_index

        tar_index.LISTED_IDENTITY = False  # this process only: the benchmark's own run
    results = run(args.root, args.tars, args.per_tar, args.photo_side, args.max_image_size, args.delay,
                  args.rounds, args.warmup, args.packs, args.store, args.workers)  # fmt: skip
    print(json.dumps({key: value for key, value in results.items() if key != "rounds"}, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
