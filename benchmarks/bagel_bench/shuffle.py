"""`bench shuffle`: the default mode's shuffle (`shuffle_buffer_size`) side by side with
storage order, on the same T2I parquet data.

For each window size it measures, over one round of one worker: the share of consecutive
samples from the same row group, the rank correlation of stream position with storage order,
the bytes read per sample at +20 ms per round trip (local files answering like an object
store, `slow_reads.delayed_storage`), and packed tokens per CPU second against the window 0
(storage order) of the same run. With `--streaming-path` (a folder holding MosaicML
Streaming's `streaming` package, never installed into the project's environment), its `py1e`
order over the same row groups as shards, at a block size of the same number of samples, is
measured for the first two figures, and its shard fetches with a cache of as many rows as
our window holds.
"""

from __future__ import annotations

import argparse
import collections
import io
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WINDOWS = (0, 64, 256, 1024, 4096)
SHAPES = {"issue (12 files x 2 row groups x 25 rows)": (12, 2, 25), "large row groups (4 x 2 x 500)": (4, 2, 500)}


def write_data(folder: Path, files: int, groups: int, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    rng = np.random.default_rng(0)
    for f in range(files):
        tables = []
        for g in range(groups):
            images, captions = [], []
            for r in range(rows):
                buffer = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buffer, "JPEG")
                images.append(buffer.getvalue())
                captions.append(json.dumps({"a": f"a noisy picture, file {f} group {g} row {r}"}))
            tables.append(pa.table({"image": pa.array(images, pa.binary()), "captions": captions}))
        with pq.ParquetWriter(folder / f"part-{f:05d}.parquet", tables[0].schema) as writer:
            for table in tables:
                writer.write_table(table, row_group_size=rows)


def order_figures(keys: list[tuple], storage: dict) -> dict:
    """Consecutive same-row-group share, and Spearman's rank correlation of stream position
    with storage order (`storage`: a row's place when read front to back, window 0)."""
    same = sum(a[:2] == b[:2] for a, b in itertools.pairwise(keys)) / max(len(keys) - 1, 1)
    ranks = np.argsort(np.argsort(np.array([storage[key] for key in keys], dtype=float), kind="stable"))
    rho = float(np.corrcoef(np.arange(len(keys), dtype=float), ranks)[0, 1]) if len(keys) > 2 else 0.0
    return {"same_row_group_share": round(same, 4), "rank_correlation": round(rho, 4)}


def family(folder: Path, tokenizer, files: int, window: int):
    from bagel_data.families.t2i import T2IIterableDataset
    from bagel_data.media.images import ImageTransform

    dataset = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(folder)], [files], num_workers=1)
    dataset.units.shuffle_buffer_size = window
    return dataset


def stream_keys(dataset, count: int) -> list[tuple]:
    keys = []
    for _, sample in itertools.islice(dataset.iter_samples(), count):
        unit, _, group, row = sample["row_key"]
        keys.append((str(dataset.epoch_units[unit]), group, row))
    return keys


def bytes_per_sample(folder: Path, tokenizer, files: int, window: int, count: int, delay: float) -> dict:
    from bagel_bench.slow_reads import Tally, delayed_storage

    tally = Tally()
    dataset = family(folder, tokenizer, files, window)
    start = time.perf_counter()
    with delayed_storage(delay=delay, tally=tally):
        for _ in itertools.islice(dataset.iter_samples(), count):
            pass
    return {
        "bytes_per_sample": round(tally["bytes"] / count),
        "reads": tally["reads"],
        "wall_s": round(time.perf_counter() - start, 2),
    }


def packed_rate(folder: Path, tokenizer, special_tokens, files: int, window: int, packs: int) -> float:
    from bagel_data import make_bagel_multimodal_dataset

    dataset = make_bagel_multimodal_dataset(
        tokenizer=tokenizer, special_tokens=special_tokens, num_workers=1, shuffle_buffer_size=window,
        grouped_datasets={"t2i_pretrain": {"dataset_names": ["t2i"], "num_used_data": [files], "weight": 1,
                                           "image_transform_args": {"image_stride": 16, "max_image_size": 64,
                                                                    "min_image_size": 32}}},
        dataset_info={"t2i_pretrain": {"t2i": {"data_dir": str(folder), "num_files": files}}},
        expected_num_tokens=900, max_num_tokens=1000, max_num_tokens_per_sample=400, prefer_buffer_before=400,
    )  # fmt: skip
    stream = iter(dataset)
    next(stream)  # start-up out of the figure
    tokens, start = 0, time.process_time()
    for batch in itertools.islice(stream, packs):
        tokens += int(sum(batch["sample_lens"]))
    return tokens / (time.process_time() - start)


STREAMING_ORDER = """
import json, sys
sys.path.insert(0, sys.argv[2])
import numpy
from streaming.base.shuffle.py1e import get_shuffle_py1e
sizes, block, seed = json.loads(sys.argv[1])
print(json.dumps([int(i) for i in get_shuffle_py1e(numpy.array(sizes), 1, seed, 0, block)]))
"""


def streaming_figures(path: str, keys_by_shard: list[list[tuple]], window: int, rows: int) -> dict | None:
    """MosaicML Streaming's py1e order over the row groups as shards (one canonical node),
    from the `streaming` package found at `path` (its shuffle needs numpy only)."""
    sizes = [len(keys) for keys in keys_by_shard]
    try:
        out = subprocess.run(
            [sys.executable, "-c", STREAMING_ORDER, json.dumps([sizes, max(window, 1), 7]), path],
            capture_output=True, text=True, check=True, timeout=300,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        return {"error": str(error)[:300]}
    flat = [key for keys in keys_by_shard for key in keys]
    keys = [flat[i] for i in json.loads(out.stdout)]
    figures = order_figures(keys, {key: index for index, key in enumerate(flat)})
    # Bytes: a shard is fetched whole; a cache holding as many rows as our window (at least one
    # shard), least recently used out, counts the fetches.
    capacity = max(1, -(-max(window, 1) // rows))
    cache: collections.OrderedDict = collections.OrderedDict()
    fetches = 0
    for key in keys:
        shard = key[:2]
        if shard in cache:
            cache.move_to_end(shard)
            continue
        fetches += 1
        cache[shard] = True
        if len(cache) > capacity:
            cache.popitem(last=False)
    figures["shard_fetches_per_shard"] = round(fetches / len(keys_by_shard), 3)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bagel-data bench shuffle", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/shuffle.json")
    parser.add_argument("--packs", type=int, default=60, help="packs timed per window")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per round trip for the bytes figure")
    parser.add_argument(
        "--streaming-path", default=None, help="a folder holding mosaicml-streaming's `streaming` package"
    )
    args = parser.parse_args(argv)
    from bagel_data import add_special_tokens, load_tokenizer

    tokenizer, special_tokens, _ = add_special_tokens(load_tokenizer("qwen2"))
    results: dict = {"windows": list(WINDOWS), "delay_s": args.delay, "shapes": {}}
    for name, (files, groups, rows) in SHAPES.items():
        with tempfile.TemporaryDirectory() as root:
            folder = Path(root)
            write_data(folder, files, groups, rows)
            total = files * groups * rows
            shape: dict = {"rows": total, "ours": {}, "streaming_py1e": {}}
            base_rate = packed_rate(folder, tokenizer, special_tokens, files, 0, args.packs)
            base_bytes = None
            in_storage = stream_keys(family(folder, tokenizer, files, 0), total)
            storage = {key: index for index, key in enumerate(in_storage)}
            for window in WINDOWS:
                figures = order_figures(stream_keys(family(folder, tokenizer, files, window), total), storage)
                figures.update(bytes_per_sample(folder, tokenizer, files, window, total, args.delay))
                base_bytes = base_bytes or figures["bytes_per_sample"]
                figures["bytes_vs_off"] = round(figures["bytes_per_sample"] / base_bytes, 3)
                rate = (
                    base_rate
                    if window == 0
                    else packed_rate(folder, tokenizer, special_tokens, files, window, args.packs)
                )
                figures["packed_tokens_per_cpu_s"] = round(rate)
                figures["tokens_per_cpu_s_vs_off"] = round(rate / base_rate, 3)
                shape["ours"][window] = figures
                print(name, "window", window, figures, flush=True)
                if args.streaming_path and window:
                    shards = [[(str(f), g, r) for r in range(rows)] for f in range(files) for g in range(groups)]
                    found = streaming_figures(args.streaming_path, shards, window, rows)
                    shape["streaming_py1e"][window] = found
                    print(name, "py1e block", window, found, flush=True)
            results["shapes"][name] = shape
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
