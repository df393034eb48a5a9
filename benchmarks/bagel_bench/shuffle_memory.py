"""`bench shuffle-memory`: what the shuffle holds in memory where row groups are large.

A shuffle window opens at least one row group per 128 of its rows (at most 8), and an open
row group's Arrow table is held while its piece is read. On photo-like T2I data with
web-scale row groups (1,000 rows), each variant streams the same samples of one worker in a
process of its own and reports the peak resident memory over what the process held before
its first sample (and the peak of Arrow's own allocations), beside the share of consecutive samples from one row group and the CPU
seconds per sample. The variants: storage order (`shuffle_buffer_size: 0`), the default
window cut by rows alone (one piece per window: the rule before the piece count), and the
windows of 256 and 1,024 rows as they are now.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# (name, shuffle_buffer_size, pieces per window or None for the library's rule)
VARIANTS = (
    ("storage order (0)", 0, None),
    ("1024, one piece per window (the rule before)", 1024, 1),
    ("256 (2 pieces per window)", 256, None),
    ("1024 (default: 8 pieces per window)", 1024, None),
)


def write_data(folder: Path, files: int, groups: int, rows: int, side: int) -> int:
    """Noise JPEGs of `side` px (incompressible, about photo-sized) with captions; returns
    the bytes written."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    rng = np.random.default_rng(0)
    total = 0
    for f in range(files):
        path = folder / f"part-{f:05d}.parquet"
        writer = None
        for g in range(groups):
            images, captions = [], []
            for r in range(rows):
                buffer = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(buffer, "JPEG")
                images.append(buffer.getvalue())
                captions.append(json.dumps({"a": f"file {f} group {g} row {r}"}))
            table = pa.table({"image": pa.array(images, pa.binary()), "captions": captions})
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table, row_group_size=rows)
        assert writer is not None
        writer.close()
        total += path.stat().st_size
    return total


def child(folder: str, files: int, window: int, pieces: int | None, count: int) -> dict:
    """One variant, in this process: stream `count` samples and measure."""
    import pyarrow as pa

    from bagel_data.families.t2i import T2IIterableDataset
    from bagel_data.media.images import ImageTransform
    from bagel_data.tokenizer import QwenTokenizer

    dataset = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), QwenTokenizer(), [folder], [files], num_workers=1)
    dataset.units.shuffle_buffer_size = window
    dataset.units.resumed_open_pieces = pieces
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.process_time()
    keys = []
    for _, sample in itertools.islice(dataset.iter_samples(), count):
        unit, _, group, _ = sample["row_key"]
        keys.append((unit, group))
    cpu = time.process_time() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    same = sum(a == b for a, b in itertools.pairwise(keys)) / max(len(keys) - 1, 1)
    return {
        "peak_rss_over_start_mb": round((peak - before) / 1024, 1),
        "arrow_peak_mb": round(pa.default_memory_pool().max_memory() / 2**20, 1),
        "same_row_group_share": round(same, 4),
        "cpu_ms_per_sample": round(1000 * cpu / max(len(keys), 1), 3),
        "samples": len(keys),
    }


def measure(folder: Path, files: int, window: int, pieces: int | None, count: int) -> dict:
    command = [sys.executable, "-m", "bagel_bench.shuffle_memory", "--child", str(folder), str(files), str(window)]
    command += [str(pieces if pieces is not None else -1), str(count)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=_child_env())
    if done.returncode != 0:
        raise RuntimeError(f"variant {window}/{pieces} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child_env() -> dict[str, str]:
    """This process's environment, with the folders this bench and the library were imported
    from first on the path: the child measures the same code."""
    import bagel_data

    roots = [str(Path(__file__).resolve().parents[1]), str(Path(bagel_data.__file__).resolve().parents[1])]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*roots, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _child_main(argv: list[str]) -> None:
    folder, files, window, pieces, count = argv
    found = child(folder, int(files), int(window), None if int(pieces) < 0 else int(pieces), int(count))
    print(json.dumps(found))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child_main(argv[1:6])
        return
    parser = argparse.ArgumentParser(prog="bagel-data bench shuffle-memory", description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--groups", type=int, default=2, help="row groups per file")
    parser.add_argument("--rows", type=int, default=1000, help="rows per row group")
    parser.add_argument("--side", type=int, default=96, help="noise JPEG side in px (96: about 20 KB)")
    parser.add_argument("--count", type=int, default=3000, help="samples streamed per variant")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all variants (the median is kept)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/shuffle_memory.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        stored = write_data(Path(folder), args.files, args.groups, args.rows, args.side)
        row_group_mb = stored / (args.files * args.groups) / 2**20
        print(f"{args.files} files x {args.groups} row groups x {args.rows} rows, {row_group_mb:.1f} MB a row group")
        runs: dict[str, list[dict]] = {name: [] for name, _, _ in VARIANTS}
        for _ in range(args.rounds):
            for name, window, pieces in VARIANTS:
                runs[name].append(measure(Path(folder), args.files, window, pieces, args.count))
    results = {
        "data": {"files": args.files, "groups": args.groups, "rows": args.rows, "row_group_mb": round(row_group_mb, 2)},
        "variants": {},
    }
    for name, _, _ in VARIANTS:
        rounds = runs[name]
        median = {key: float(np.median([run[key] for run in rounds])) for key in rounds[0]}
        results["variants"][name] = median
        print(f"{name:48s} peak RSS +{median['peak_rss_over_start_mb']:7.1f} MB (Arrow's "
              f"{median['arrow_peak_mb']:6.1f} MB)  same row group "
              f"{100 * median['same_row_group_share']:5.1f} %  {median['cpu_ms_per_sample']:.3f} CPU ms/sample")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
