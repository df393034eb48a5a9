"""`resize_backend: torch` against Pillow's resize, as a user would meet it: photo-like images
of assorted sizes, each resized by BAGEL's 1024-pixel VAE rule and 980-pixel ViT rule, with
bicubic and bilinear, on one thread.

    PYTHONPATH=src python scripts/resize_compare.py --cases 60 --rounds 5 --out /tmp/resize.json

Per filter: the CPU seconds of Pillow's `Image.resize` and of `media/resize.py` over all the
cases (each the median of `--rounds` interleaved rounds), their ratio, the largest difference
of any pixel value (8-bit levels) and the PSNR of torch's pixels against Pillow's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

from bagel_data.media.images import RESAMPLE_FILTERS, ImageTransform, rgbx_storage
from bagel_data.media.resize import resize_rgbx
from bagel_data.synthetic.images import photo_like_image

# BAGEL's transforms (configs/example.yaml): the VAE rule and the ViT rule.
RULES = (ImageTransform(1024, 512, 16), ImageTransform(980, 224, 14))


def cases(count: int, seed: int = 0) -> list:
    """(image, its RGBX storage, target size) of `count` photo-like images, 0.2-3 MP."""
    rng = np.random.default_rng(seed)
    out = []
    for index in range(count):
        width, height = (int(v) for v in rng.integers(400, 1800, 2))
        image = photo_like_image(rng, width, height)
        target = RULES[index % 2].target_size(width, height)
        out.append((image, rgbx_storage(image), target))
    return out


def _cpu(run) -> float:
    start = time.process_time()
    run()
    return time.process_time() - start


def measure(items: list, resample: str, rounds: int) -> dict:
    pillow_filter = RESAMPLE_FILTERS[resample]
    pillow, fast = [], []
    for _ in range(rounds):
        pillow.append(_cpu(lambda: [image.resize(size, pillow_filter) for image, _, size in items]))
        fast.append(_cpu(lambda: [resize_rgbx(storage, size, resample) for _, storage, size in items]))
    squared, values, worst = 0, 0, 0
    for image, storage, size in items:
        exact = np.asarray(image.resize(size, pillow_filter)).transpose(2, 0, 1).astype(np.int64)
        diff = resize_rgbx(storage, size, resample).numpy().astype(np.int64) - exact
        squared, values, worst = (
            squared + int(np.square(diff).sum()),
            values + diff.size,
            max(worst, int(abs(diff).max())),
        )
    return {
        "pillow_cpu_seconds": statistics.median(pillow),
        "torch_cpu_seconds": statistics.median(fast),
        "speedup": statistics.median(pillow) / statistics.median(fast),
        "max_abs_levels": worst,
        "psnr_db": math.inf if squared == 0 else 10 * math.log10(255**2 * values / squared),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    items = cases(args.cases)
    res = {resample: measure(items, resample, args.rounds) for resample in ("bicubic", "bilinear")}
    res["config"] = {"cases": args.cases, "rounds": args.rounds, "threads": 1, "torch": torch.__version__}
    text = json.dumps(res, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
