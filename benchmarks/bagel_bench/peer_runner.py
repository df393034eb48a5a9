"""The peers' side of `bench peers`, run under the peers' Python (a virtual environment holding
megatron-energon and mosaicml-streaming, never the project's own): it imports neither
bagel_data nor bagel_bench, only the peers, PIL, numpy and torch.

    <peers python> peer_runner.py versions
    <peers python> peer_runner.py write-mds TARS OUT        # one MDS shard per tar, same samples
    <peers python> peer_runner.py energon-prepare TARS      # Energon's index and dataset.yaml
    <peers python> peer_runner.py read LOADER PATH ...      # samples/s, decoded to RGB and resized
    <peers python> peer_runner.py order LOADER PATH ...     # the sample keys in stream order

Each command prints one JSON line. A remote PATH (`s3://bucket/prefix`) is read through the
S3 endpoint in `--endpoint` (the benchmark's moto store behind its delay proxy): Streaming
through boto3 (`S3_ENDPOINT_URL`), Energon through a Multi-Storage Client profile.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def versions() -> dict:
    from importlib.metadata import version

    found: dict[str, str | None] = {}
    for name in ("megatron-energon", "mosaicml-streaming", "torch", "multi-storage-client", "boto3"):
        try:
            found[name] = version(name)
        except Exception:  # a missing one is reported as missing
            found[name] = None
    return found


def tar_samples(path: Path):
    """(key, {ext: bytes}) of a WebDataset tar, in member order."""
    with tarfile.open(path) as archive:
        current, fields = None, {}
        for member in archive:
            if not member.isfile():
                continue
            key, _, ext = member.name.partition(".")
            if key != current and current is not None:
                yield current, fields
                fields = {}
            current = key
            data = archive.extractfile(member)
            assert data is not None  # a regular file has its bytes
            fields[ext] = data.read()
        if current is not None:
            yield current, fields


def write_mds(tars: Path, out: Path) -> dict:
    """Each tar as one MDS folder (a single shard, as the tar is one unit), merged into one index."""
    from streaming import MDSWriter

    out.mkdir(parents=True, exist_ok=True)
    folders = []
    for tar in sorted(tars.glob("*.tar")):
        folder = out / tar.stem
        columns = {"key": "str", "jpg": "bytes", "txt": "str"}
        with MDSWriter(out=str(folder), columns=columns, size_limit=(1 << 32) - 1) as writer:
            for key, fields in tar_samples(tar):
                writer.write({"key": key, "jpg": fields["jpg"], "txt": fields["txt"].decode()})
        folders.append(folder)
    # One index over the folders' shards, as Streaming's merge_index writes it (its basenames
    # relative to `out`): that function fetches each part through its remote machinery.
    shards = []
    for folder in folders:
        for shard in json.loads((folder / "index.json").read_text())["shards"]:
            for part in ("raw_data", "zip_data"):
                if shard.get(part):
                    shard[part]["basename"] = f"{folder.name}/{shard[part]['basename']}"
            shards.append(shard)
    (out / "index.json").write_text(json.dumps({"version": 2, "shards": shards}))
    return {"shards": len(shards)}


DATASET_YAML = """\
sample_type:
  __module__: megatron.energon
  __class__: CaptioningSample
field_map:
  image: jpg
  caption: txt
"""


def energon_prepare(tars: Path) -> dict:
    """What `energon prepare` writes (its index of the tars, the split, the field map), without
    its questions: all tars in the train split, the jpg as image and the txt as caption."""
    from megatron.energon.flavors import BaseWebdatasetFactory

    paths = [tar.name for tar in sorted(tars.glob("*.tar"))]
    BaseWebdatasetFactory.prepare_dataset(tars, paths, split_parts_ratio=[("train", 1.0)], workers=1)
    (tars / ".nv-meta" / "dataset.yaml").write_text(DATASET_YAML)
    return {"tars": len(paths)}


def rgb_resized(data: bytes, size: int):
    """The work every loader here does per sample: JPEG to RGB, the longer side to `size`,
    a float (C, H, W) tensor."""
    import numpy as np
    import torch
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    scale = size / max(image.size)
    width, height = max(1, round(image.width * scale)), max(1, round(image.height * scale))
    image = image.resize((width, height), Image.Resampling.BICUBIC)
    return torch.from_numpy(np.array(image)).permute(2, 0, 1).float().div_(255)


def msc_config(endpoint: str, bucket: str, folder: Path) -> str:
    """A Multi-Storage Client configuration sending profile `bench` to the S3 endpoint (no cache)."""
    config = {"profiles": {"bench": {
        "storage_provider": {"type": "s3", "options": {"base_path": bucket, "endpoint_url": endpoint,
                                                        "region_name": "us-east-1"}},
        "credentials_provider": {"type": "S3Credentials", "options": {"access_key": "testing",
                                                                       "secret_key": "testing"}},
    }}}  # fmt: skip
    path = folder / "msc_config.json"
    path.write_text(json.dumps(config))
    return str(path)


def remote_setup(path: str, endpoint: str | None, scratch: Path) -> str:
    """The environment for reading `path` from the benchmark's store; Energon's form of it."""
    if not path.startswith("s3://"):
        return path
    assert endpoint, "a remote path needs --endpoint"
    os.environ.update(CREDENTIALS)
    os.environ["S3_ENDPOINT_URL"] = endpoint  # Streaming's boto3 client
    bucket, _, prefix = path.removeprefix("s3://").partition("/")
    os.environ["MSC_CONFIG"] = msc_config(endpoint, bucket, scratch)
    return f"msc://bench/{prefix}"


def energon_stream(path: str, workers: int, size: int | None, window: int, per_sequence: int | None):
    """Energon's training stream of (key, image or None): its shuffle where `window` > 0."""
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset
    from megatron.energon.task_encoder.base import DefaultTaskEncoder

    class Encoder(DefaultTaskEncoder):
        decoder = None  # raw bytes: the decode below is the same as the other loaders'

        def encode_sample(self, sample):
            return (sample.__key__, None if size is None else rgb_resized(sample.image, size))

        def batch(self, samples):
            return samples

    config = WorkerConfig(rank=0, world_size=1, num_workers=workers)
    dataset = get_train_dataset(
        path, batch_size=None, shuffle_buffer_size=window or None, max_samples_per_sequence=per_sequence,
        worker_config=config, task_encoder=Encoder(), repeat=True,
    )  # fmt: skip
    yield from get_loader(dataset)


def streaming_stream(path: str, workers: int, size: int | None, window: int, scratch: Path):
    """Streaming's stream of (key, image or None): `py1e` at block size `window` where > 0."""
    import torch
    from streaming import StreamingDataset

    class Decoded(StreamingDataset):
        def __getitem__(self, index):
            sample = super().__getitem__(index)
            return sample["key"], None if size is None else rgb_resized(sample["jpg"], size)

    remote = path if path.startswith("s3://") else None
    local = str(scratch / "cache") if remote else path
    dataset = Decoded(
        remote=remote, local=local, shuffle=window > 0, shuffle_algo="py1e", shuffle_block_size=max(window, 1),
        shuffle_seed=7, batch_size=1, epoch_size=None,
    )  # fmt: skip
    loader: Any = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
    while True:
        yield from loader


def stream(args, scratch: Path, size: int | None, window: int):
    path = remote_setup(args.path, args.endpoint, scratch)
    if args.loader == "energon":
        return energon_stream(path, args.workers, size, window, args.max_samples_per_sequence)
    return streaming_stream(args.path, args.workers, size, window, scratch)


def read(args) -> dict:
    """Samples per second after `--warmup`, decoded and resized; first sample's seconds."""
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        items = stream(args, Path(scratch), args.size, args.window)
        next(items)
        first = time.perf_counter() - start
        for _ in range(args.warmup):
            next(items)
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.count):
            next(items)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
        items.close()
        cache = sum(f.stat().st_size for f in Path(scratch).rglob("*") if f.is_file())
    return {"samples_per_second": args.count / seconds, "main_cpu_seconds_per_sample": cpu_seconds / args.count,
            "first_sample_seconds": first, "disk_cache_bytes": cache}  # fmt: skip


def order(args) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        items = stream(args, Path(scratch), None, args.window)
        keys = [next(items)[0] for _ in range(args.count)]
        items.close()
    return {"keys": keys}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="peer_runner", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("versions")
    mds = commands.add_parser("write-mds")
    mds.add_argument("tars", type=Path)
    mds.add_argument("out", type=Path)
    prepare = commands.add_parser("energon-prepare")
    prepare.add_argument("tars", type=Path)
    for name in ("read", "order"):
        command = commands.add_parser(name)
        command.add_argument("loader", choices=("energon", "streaming"))
        command.add_argument("path")
        command.add_argument("--endpoint", default=None)
        command.add_argument("--workers", type=int, default=0)
        command.add_argument("--window", type=int, default=0, help="shuffle buffer (Energon) or py1e block")
        command.add_argument("--max-samples-per-sequence", type=int, default=None)
        command.add_argument("--count", type=int, default=256)
        command.add_argument("--warmup", type=int, default=16)
        command.add_argument("--size", type=int, default=512)
    args = parser.parse_args(argv)
    if args.command == "versions":
        result = versions()
    elif args.command == "write-mds":
        result = write_mds(args.tars, args.out)
    elif args.command == "energon-prepare":
        result = energon_prepare(args.tars)
    elif args.command == "read":
        result = read(args)
    else:
        result = order(args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
