"""`bagel-data bench peers --shuffle`: our shuffle side by side with MosaicML Streaming's `py1e`
and Megatron-Energon's shuffle buffer, the real libraries, on the same samples.

For each data shape (the issue's 12 files x 2 row groups x 25 rows, and web-like row groups of
1,000 rows) the samples are written as our T2I parquet, as WebDataset tars of one row group
each (Energon reads them after its own index is built) and as Streaming's MDS (a shard per
row group), and put in an S3 store (moto, a process of its own) behind a proxy adding
`--delay` per request. Each loader then reads one pass (as many samples as the data holds)
from the store, one process, at the same memory: ours with `shuffle_buffer_size` = W,
Energon with `shuffle_buffer_size` = W (and `max_samples_per_sequence`), Streaming with a
`py1e` block of W samples. Measured: the share of consecutive samples from the same storage
unit (row group = tar = shard), Spearman's rank correlation of stream position with storage
order, bytes the store sent per sample against ours with the shuffle off, and (ours alone:
the peers do not pack) packed tokens per CPU second against the shuffle off, same run.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import tarfile
import tempfile
import time
from pathlib import Path

from .peer_calls import find_peers, peer
from .shuffle import bytes_per_sample, order_figures, packed_rate, write_data

# files x row groups x rows: the layout, and web-like row groups of 1,000 rows
# (and a tiny one, to try the command)
SHAPES = {"issue": (12, 2, 25), "web": (4, 2, 1000), "tiny": (3, 2, 6)}
BUCKET = "s3://bench-peers-shuffle"
PER_SEQUENCE = 100  # Energon's max_samples_per_sequence, as its documentation's example sets it


def write_tars(parquet: Path, out: Path) -> None:
    """Each row group of the parquet files as one tar, samples `f{file}g{group}r{row}`."""
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    for number, path in enumerate(sorted(parquet.glob("*.parquet"))):
        reader = pq.ParquetFile(path)
        for group in range(reader.num_row_groups):
            table = reader.read_row_group(group).to_pydict()
            with tarfile.open(out / f"f{number:03d}g{group}.tar", "w") as archive:
                for row, (image, caption) in enumerate(zip(table["image"], table["captions"])):
                    key = f"f{number:03d}g{group}r{row:05d}"
                    for ext, data in ((".jpg", image), (".txt", caption.encode())):
                        info = tarfile.TarInfo(key + ext)
                        info.size = len(data)
                        archive.addfile(info, io.BytesIO(data))


def key_of(name: str) -> tuple[int, int, int]:
    found = re.fullmatch(r"f(\d+)g(\d+)r(\d+)", name.rsplit("/", 1)[-1])
    assert found, name
    return int(found[1]), int(found[2]), int(found[3])


def ours_keys(uri: str, tokenizer, files: int, window: int, count: int) -> list[tuple]:
    """Our stream's (file, group, row) for `count` samples, one worker."""
    import itertools

    from .shuffle import family

    dataset = family(uri, tokenizer, files, window)  # type: ignore[arg-type]  # a URI is a folder too
    keys = []
    for _, sample in itertools.islice(dataset.iter_samples(), count):
        unit, _, group, row = sample["row_key"]
        name = str(dataset.epoch_units[unit])
        keys.append((int(re.search(r"part-(\d+)", name)[1]), group, row))  # type: ignore[index]
    return keys


def measure_shape(args, python, store, tokenizer, special, name, files, groups, rows) -> dict:
    from bagel_data.sources import storage

    total = files * groups * rows
    storage_order = {(f, g, r): i for i, (f, g, r) in enumerate(
        (f, g, r) for f in range(files) for g in range(groups) for r in range(rows))}  # fmt: skip
    shape: dict = {"rows": total, "ours": {}, "ours_local": {}, "energon": {}, "streaming_py1e": {}}
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        (folder / "parquet").mkdir()
        write_data(folder / "parquet", files, groups, rows)
        tag = f"{BUCKET}/{files}x{groups}x{rows}"
        store.upload(folder / "parquet", f"{tag}/parquet")
        if python is not None:
            write_tars(folder / "parquet", folder / "tars")
            peer(python, "energon-prepare", str(folder / "tars"))
            peer(python, "write-mds", str(folder / "tars"), str(folder / "mds"))
            store.upload(folder / "tars", f"{tag}/tars")
            store.upload(folder / "mds", f"{tag}/mds")
        stored = {form: _stored_bytes(folder / form) / total for form in ("parquet", "tars", "mds")}
        shape["stored_bytes_per_sample"] = {form: round(value) for form, value in stored.items()}
        storage.register_options(BUCKET, store.proxy.storage_options())
        store.proxy.delay_s = args.delay
        shape["packed_tokens_per_cpu_s_vs_off"] = cpu_rounds(
            folder / "parquet", tokenizer, special, files, args.windows, args.packs, args.rounds
        )
        print(name, "packed tokens per CPU s vs off", shape["packed_tokens_per_cpu_s_vs_off"], flush=True)
        if args.cpu_only:
            return shape
        base_bytes = None
        for window in args.windows:
            store.bytes()
            keys = ours_keys(f"{tag}/parquet", tokenizer, files, window, total)
            figures = order_figures(keys, storage_order)
            figures["bytes_per_sample"] = round(store.bytes() / total)
            base_bytes = base_bytes or figures["bytes_per_sample"]
            figures["bytes_vs_ours_off"] = round(figures["bytes_per_sample"] / base_bytes, 3)
            figures["bytes_vs_stored"] = round(figures["bytes_per_sample"] / stored["parquet"], 3)
            shape["ours"][window] = figures
            print(name, "ours (store)", window, figures, flush=True)
            # The same files on local disk: the walk by rows (the shuffle below the file) applies;
            # bytes as the delayed local store of `bench shuffle` serves them.
            local = order_figures(ours_keys(str(folder / "parquet"), tokenizer, files, window, total), storage_order)
            local.update(bytes_per_sample(folder / "parquet", tokenizer, files, window, total, args.delay))
            local["bytes_vs_stored"] = round(local["bytes_per_sample"] / stored["parquet"], 3)
            shape["ours_local"][window] = local
            print(name, "ours (local disk)", window, local, flush=True)
            if python is None or not window:
                continue
            for loader, form, extra in (
                ("energon", "tars", ["--max-samples-per-sequence", str(PER_SEQUENCE)]),
                ("streaming_py1e", "mds", []),
            ):
                store.bytes()
                command = ["order", loader.split("_")[0], f"{tag}/{form}", "--endpoint", store.proxy.endpoint,
                           "--window", str(window), "--count", str(total), *extra]  # fmt: skip
                try:
                    found = [key_of(key) for key in peer(python, *command)["keys"]]
                except RuntimeError as error:
                    shape[loader][window] = {"error": str(error)}
                    continue
                figures = order_figures(found, storage_order)
                figures["bytes_per_sample"] = round(store.bytes() / total)
                figures["bytes_vs_ours_off"] = round(figures["bytes_per_sample"] / base_bytes, 3)
                figures["bytes_vs_stored"] = round(figures["bytes_per_sample"] / stored[form], 3)
                shape[loader][window] = figures
                print(name, loader, window, figures, flush=True)
    return shape


def cpu_rounds(folder: Path, tokenizer, special, files: int, windows: list[int], packs: int, rounds: int) -> dict:
    """Packed tokens per CPU second at each window against the shuffle off, on local files (where
    the walk by rows runs), the windows alternating in each round; each ratio is taken within
    its round, then the median and range over the rounds."""
    ratios: dict[int, list[float]] = {window: [] for window in windows if window}
    for _ in range(rounds):
        found = {window: packed_rate(folder, tokenizer, special, files, window, packs) for window in [0, *ratios]}
        for window in ratios:
            ratios[window].append(found[window] / found[0])
    return {
        window: {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
                 "max": round(max(values), 3)}
        for window, values in ratios.items()
    }  # fmt: skip


def _stored_bytes(folder: Path) -> int:
    """The data's bytes as stored (the samples' files, not Energon's index beside them)."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and ".nv-meta" not in path.parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bagel-data bench peers --shuffle", description=__doc__.splitlines()[0])
    parser.add_argument("--peers-python", default=None)
    parser.add_argument("--windows", type=int, nargs="+", default=[0, 256, 1024, 4096], help="samples held")
    parser.add_argument("--packs", type=int, default=40, help="packs timed per window (ours)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the packed-tokens figure (ours)")
    parser.add_argument("--cpu-only", action="store_true", help="only the packed tokens per CPU second")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per round trip")
    parser.add_argument("--shapes", nargs="+", default=["issue", "web"], choices=list(SHAPES), help="data shapes")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/peers_shuffle.json"))
    args = parser.parse_args(argv)
    from bagel_data import add_special_tokens, load_tokenizer

    from .store_process import store_process

    python, found = find_peers(args.peers_python) if not args.cpu_only else (None, {"skipped": "--cpu-only"})
    print("peers:", found, flush=True)
    tokenizer, special, _ = add_special_tokens(load_tokenizer("qwen2"))
    results: dict = {"windows": args.windows, "delay_s": args.delay, "peers": found, "shapes": {},
                     "energon_max_samples_per_sequence": PER_SEQUENCE}  # fmt: skip
    start = time.perf_counter()
    with store_process(0.0) as store:
        for name in args.shapes:
            results["shapes"][name] = measure_shape(args, python, store, tokenizer, special, name, *SHAPES[name])
    results["seconds"] = round(time.perf_counter() - start)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print("wrote", args.out)
    return 0
