"""What the read-ahead buys on slow storage: steady packs/s and resume time, with and
without it, at a round-trip delay per open and per read (`bench/slow_reads.py`).

    python -m bagel_bench.read_ahead --t2i bench_data/t2i [--out read_ahead.json]

It reads the benchmark's T2I shards (`DemoSizes.bench()`: 4 files x 4 row groups x 16 rows
of ~1 MP images; `bagel-data bench` writes them) in this process, which walks the stream
as one DataLoader worker does. Each figure is a ratio against the local, inline run
measured in the same invocation. Resume: a checkpoint whose buffer holds `--buffer`
samples, restored and rebuilt (`sample_at` for each, as the packer's `_materialize` does)
and the time to the first pack after the restore.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch

from bagel_data.assembly import build_packed_dataset
from bagel_data.schema.settings import READ_AHEAD_BYTES, Settings
from bagel_data.tokenizer import QwenTokenizer

from .slow_reads import OpenCounter, delayed_storage

SPECIAL = {"bos_token_id": 151644, "eos_token_id": 151645, "start_of_image": 151652, "end_of_image": 151653}
PACKING: dict = {"expected_num_tokens": 32768, "max_num_tokens": 36864, "max_num_tokens_per_sample": 16384,
           "prefer_buffer_before": 16384, "max_buffer_size": 50, "max_latent_size": 64}  # fmt: skip
ON = READ_AHEAD_BYTES  # the default budget on an object store


# The benchmark's VAE transform (BAGEL's). `--max-image-size 256` makes decoding cheap (JPEG
# draft decoding at 1/4 scale): a pack then reads ~8 row groups and waits on I/O, not the CPU.
IMAGE_SIZE = [1024]


def t2i_dataset(t2i_dir: str, read_ahead: int, files: int = 4, **settings):
    size = IMAGE_SIZE[0]
    grouped = {"t2i_pretrain": {
        "dataset_names": ["t2i"], "num_used_data": [files], "weight": 1.0,
        "image_transform_args": {"image_stride": 16, "max_image_size": size, "min_image_size": size // 2},
    }}  # fmt: skip
    info = {"t2i_pretrain": {"t2i": {"data_dir": t2i_dir, "num_files": files, "num_total_samples": files * 64}}}
    config = Settings(**{**PACKING, **settings}, read_ahead_bytes=read_ahead)
    return build_packed_dataset(
        QwenTokenizer(), SPECIAL, grouped, info, config, local_rank=0, world_size=1, num_workers=1
    )


def steady(t2i_dir: str, delay: float, read_ahead: int, warmup: int, packs: int) -> dict:
    """Packs per second after `warmup` packs (start-up is not what this measures)."""
    with delayed_storage(delay):
        dataset = t2i_dataset(t2i_dir, read_ahead)
        stream = iter(dataset)
        for _ in range(warmup):
            next(stream)
        start = time.perf_counter()
        for _ in range(packs):
            next(stream)
        seconds = time.perf_counter() - start
        stats = dataset.stats["read_ahead"].get("t2i_pretrain")
        stream.close()
    return {"packs_per_second": packs / seconds, "seconds": seconds, "read_ahead": stats}


def read_path(t2i_dir: str, delay: float, read_ahead: int, row_groups: int) -> dict:
    """Row groups per second through the T2I family's own reads (`open_parquet`, then each
    row group, as `_rows` reads them) with no decoding: the I/O side alone, which the CPU
    of a shared machine does not hide. A pack of the benchmark's images is ~half a row group."""
    from bagel_data.families.t2i import COLUMNS

    with delayed_storage(delay):
        family = t2i_dataset(t2i_dir, read_ahead).grouped_datasets[0]
        shard = family.worker_shard()
        stop = family.follow_stream(read_ahead, shard, 0, None)
        units = itertools.cycle([family.epoch_units[int(unit)] for unit in shard.unit_ids])
        done, start = 0, time.perf_counter()
        while done < row_groups:
            with family.reads.open_parquet(next(units)) as reader:
                for group in range(reader.num_row_groups):
                    reader.read_row_group(group, COLUMNS)
                    done += 1
        seconds = time.perf_counter() - start
        stop()
    return {"row_groups_per_second": done / seconds, "read_ahead": family.read_ahead_stats()}


def _buffered_checkpoint(t2i_dir: str, size: int) -> tuple[dict, list[tuple]]:
    """A real checkpoint (after one pack) whose buffer is replaced by `size` rows spread
    over the worker's files and row groups: what a long run's buffer looks like."""
    dataset = t2i_dataset(t2i_dir, 0)
    stream = iter(dataset)
    next(stream)
    state = dataset.state_dict()
    stream.close()
    rows = [(0, unit, group, row) for row in range(16) for group in range(4) for unit in range(4)]
    cursors = rows[1 : 1 + size * 3 : 3]  # every third row: a few per row group, every file
    state["stages"]["overflow"]["buffer"] = [["t2i_pretrain", list(cursor)] for cursor in cursors]
    return state, cursors


def resume(t2i_dir: str, delay: float, read_ahead: int, size: int, rebuild_threads: int | None = None) -> dict:
    """Rebuilding a buffer of `size` samples one after another, and the first best-fit pack
    after the restore (which needs the whole buffer: rebuilt on `rebuild_threads` threads
    beside the packer, by default the CPUs less one)."""
    state, cursors = _buffered_checkpoint(t2i_dir, size)
    opens = OpenCounter()
    with delayed_storage(delay, opens=opens):
        family = t2i_dataset(t2i_dir, read_ahead).grouped_datasets[0]
        start = time.perf_counter()
        family.prefetch_rows(cursors, read_ahead)
        rebuilt = [family.sample_at(cursor, pending=True) for cursor in cursors]
        rebuild_seconds = time.perf_counter() - start
        family.stop_read_ahead()
        assert all(sample is not None for sample in rebuilt)
        rebuild_opens = sum(opens.counts.values())
        dataset = t2i_dataset(t2i_dir, read_ahead, pack_strategy="best_fit", rebuild_threads=rebuild_threads)
        dataset.load_state_dict(state)
        start = time.perf_counter()
        stream = iter(dataset)
        next(stream)
        first_pack = time.perf_counter() - start
        stream.close()
    return {"rebuild_seconds": rebuild_seconds, "rebuild_opens": rebuild_opens, "first_pack_seconds": first_pack}


def run(t2i_dir: str, delays: list[float], warmup: int, packs: int, buffer: int) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a DataLoader worker
    try:
        rows: dict = {"config": {"t2i_dir": t2i_dir, "warmup": warmup, "packs": packs, "budget": ON,
                                 "max_image_size": IMAGE_SIZE[0]}}  # fmt: skip
        for delay, budget in itertools.product(delays, (0, ON)):
            name = f"{int(delay * 1000)}ms/{'ahead' if budget else 'inline'}"
            rows[name] = steady(t2i_dir, delay, budget, warmup, packs)
            print(f"steady {name}: {rows[name]['packs_per_second']:.2f} packs/s", flush=True)
        for delay, budget in itertools.product(delays, (0, ON)):
            name = f"reads {int(delay * 1000)}ms/{'ahead' if budget else 'inline'}"
            rows[name] = read_path(t2i_dir, delay, budget, 32)
            print(f"{name}: {rows[name]['row_groups_per_second']:.1f} row groups/s", flush=True)
        local = rows["0ms/inline"]["packs_per_second"]
        local_reads = rows["reads 0ms/inline"]["row_groups_per_second"]
        for row in rows.values():
            if "packs_per_second" in row:
                row["vs_local_inline"] = row["packs_per_second"] / local
            elif "row_groups_per_second" in row:
                row["vs_local_inline"] = row["row_groups_per_second"] / local_reads
        resume_delay = 0.02 if 0.02 in delays else delays[-1]
        # 0 ms inline: the rebuild's own work (decoding `buffer` images) on one thread.
        cases: list[tuple[float, int, int | None]] = [
            (0.0, 0, 0), (resume_delay, 0, 0), (resume_delay, ON, 0), (0.0, ON, None), (resume_delay, ON, None),
        ]  # fmt: skip
        for delay, budget, rebuilders in cases:
            name = f"resume {int(delay * 1000)}ms/{'ahead' if budget else 'inline'}"
            name += "" if rebuilders == 0 or not budget else "/threads"
            rows[name] = resume(t2i_dir, delay, budget, buffer, rebuilders)
            print(f"{name}: {rows[name]}", flush=True)
        return rows
    finally:
        torch.set_num_threads(threads)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--t2i", required=True, help="folder of the benchmark's T2I shards")
    parser.add_argument("--delays", default="0,0.02,0.1", help="seconds per round trip, comma-separated")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--packs", type=int, default=16)
    parser.add_argument("--buffer", type=int, default=50)
    parser.add_argument("--max-image-size", type=int, default=1024, help="the VAE transform's largest side")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    IMAGE_SIZE[0] = args.max_image_size
    delays = [float(value) for value in args.delays.split(",")]
    results = run(str(Path(args.t2i).resolve()), delays, args.warmup, args.packs, args.buffer)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
