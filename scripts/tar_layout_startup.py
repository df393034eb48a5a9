"""Start-up cost of the walk by rows over local WebDataset tars: the seconds to lay out a
group's samples (every tar's samples per block, `TarBlocks.count_rows`) on a node whose index
cache is cold (the first process lists every tar) and then warm (every other process maps
the indexes). Tars are copies of one tar of `--samples` small JPEGs with captions.

    PYTHONPATH=src:benchmarks .venv/bin/python scripts/tar_layout_startup.py --tars 1000 --root tar_layout

Prints one JSON line per case; the index cache is a fresh folder under `--root`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from PIL import Image

from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.tokenizer import QwenTokenizer


def write_tars(folder: Path, count: int, samples: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    first = folder / "00000.tar"
    if not first.exists():
        out = io.BytesIO()
        Image.new("RGB", (64, 48), (200, 30, 30)).save(out, "JPEG")
        with tarfile.open(first, "w") as archive:
            for sample in range(samples):
                for ext, data in ((".jpg", out.getvalue()), (".txt", b"a red square")):
                    info = tarfile.TarInfo(f"{sample:05d}{ext}")
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))
    for index in range(1, count):
        if not (folder / f"{index:05d}.tar").exists():
            shutil.copyfile(first, folder / f"{index:05d}.tar")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tars", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=100, help="samples per tar")
    parser.add_argument("--root", type=Path, default=Path("tar_layout"))
    args = parser.parse_args()
    folder = args.root / f"tars_{args.tars}x{args.samples}"
    write_tars(folder, args.tars, args.samples)
    tokenizer = QwenTokenizer()
    os.environ["BAGEL_DATA_INDEX_CACHE"] = tempfile.mkdtemp(dir=args.root, prefix="cache-")
    for node in ("cold", "warm"):
        family = T2IIterableDataset(
            "t2i", ImageTransform(64, 32, 16), tokenizer, [str(folder)], [args.tars], num_workers=1
        )
        start = time.perf_counter()
        layout = family.units.row_layout()
        assert layout is not None, "local tars walk by rows"
        print(json.dumps({
            "tars": args.tars, "samples": layout.total, "node": node,
            "layout_seconds": round(time.perf_counter() - start, 3),
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
