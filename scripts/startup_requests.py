"""Start-up of the T2I and edit families against S3 (moto on loopback behind the counting,
delaying proxy of bench/s3_proxy.py) at several shard counts: seconds and requests of
construction and of one worker's first pack. The issue-29 reproduction:

    PYTHONPATH=src:benchmarks .venv/bin/python scripts/startup_requests.py --shards 100,1000 --delay-ms 20

`--again` then builds the dataset a second time and draws its first pack, as another worker
of the same node does (the remote files' row counts are then in the node cache).

Shards are tiny copies of one file (two rows, two row groups for edit), so the figures are
requests and round trips, not reading. One JSON line per (shard count, family).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from bagel_bench.moto_store import moto_store
from bagel_data import ImageTransform, T2IIterableDataset, UnifiedEditIterableDataset
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.packed_dataset import PackedDataset
from bagel_data.tokenizer import QwenTokenizer

SPECIAL = {"bos_token_id": 151644, "eos_token_id": 151645, "start_of_image": 151652, "end_of_image": 151653}


def image(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(out, fmt)
    return out.getvalue()


def one_shard(path: Path, family: str) -> None:
    if family == "t2i":
        table = pa.table({"image": [image("JPEG")] * 2, "captions": [json.dumps({"c": "a red square"})] * 2})
    else:
        table = pa.table({"image_list": [[image("PNG")] * 2] * 2, "instruction_list": [[["make it red"]]] * 2})
    pq.write_table(table, path, row_group_size=1)


def build(family: str, uri: str, count: int, tok) -> PackedDataset:
    if family == "t2i":
        group = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tok, [uri], [count], num_workers=1)
    else:
        info = {f"part-{i:05d}.parquet": {"num_row_groups": 2} for i in range(count)}
        group = UnifiedEditIterableDataset(
            "edit", ImageTransform(32, 16, 16), tok, ImageTransform(28, 14, 14), [uri], [count], info, num_workers=1
        )
    config = PackingConfig(expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70)
    return PackedDataset.from_groups(
        {family: group}, config, SPECIAL, weights={family: 1.0}, mandatory={family: False},
        local_rank=0, world_size=1, num_workers=1, data_seed=0,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", default="100,1000", help="comma-separated shard counts")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="added to each round trip")
    parser.add_argument("--families", default="t2i,edit")
    parser.add_argument(
        "--again", action="store_true", help="then a second dataset, as another worker of the node (its cache warm)"
    )
    args = parser.parse_args()
    tok = QwenTokenizer()
    with moto_store() as store, tempfile.TemporaryDirectory() as tmp:
        for count in [int(n) for n in args.shards.split(",")]:
            for family in args.families.split(","):
                folder = Path(tmp) / f"{family}_{count}"
                folder.mkdir()
                one_shard(folder / "part-00000.parquet", family)
                for i in range(1, count):
                    shutil.copyfile(folder / "part-00000.parquet", folder / f"part-{i:05d}.parquet")
                uri = f"s3://startup-{count}/{family}"
                store.upload(folder, uri)
                store.register(uri)
                store.proxy.delay_s = args.delay_ms / 1000
                store.proxy.counter.reset()
                start = time.perf_counter()
                dataset = build(family, uri, count, tok)
                built, construction = time.perf_counter() - start, store.proxy.counter.reset()
                next(iter(dataset))  # this process plays the worker
                first = time.perf_counter() - start - built
                print(json.dumps({
                    "shards": count, "family": family, "delay_ms": args.delay_ms,
                    "construction_seconds": round(built, 3), "construction_requests": construction,
                    "first_pack_seconds": round(first, 3), "first_pack_requests": store.proxy.counter.reset(),
                }), flush=True)  # fmt: skip
                if args.again:  # another worker of this node: the row counts are in the node cache
                    start = time.perf_counter()
                    dataset = build(family, uri, count, tok)
                    store.proxy.counter.reset()
                    next(iter(dataset))
                    print(json.dumps({
                        "shards": count, "family": family, "delay_ms": args.delay_ms, "node": "warm",
                        "construction_and_first_pack_seconds": round(time.perf_counter() - start, 3),
                        "first_pack_requests": store.proxy.counter.reset(),
                    }), flush=True)  # fmt: skip
                store.proxy.delay_s = 0


if __name__ == "__main__":
    main()
