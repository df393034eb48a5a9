"""Synthetic datasets in the BAGEL on-disk formats, for the demo, tests and benchmark.

`write_demo_dataset` writes them all: the T2I and edit parquet rows (here), the VLM JSONL
and its media (`vlm.py`) and the two config files (`configs.py`), at `DemoSizes`
(`sizes.py`). All randomness flows from one ``numpy.random.default_rng(seed)``; global
RNGs are never touched, so generation is reproducible byte for byte.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from ..formats import EDIT_SCHEMA, T2I_SCHEMA
from ..sources.parquet import write_parquet_info
from . import text
from .configs import DemoPaths, write_configs
from .images import (
    encode_image,
    finish_picture,
    paint_shape,
    photo_like_image,
    scene_size,
    smooth_scene,
)
from .sizes import DemoSizes, ParquetSizes
from .vlm import write_vlm

# Bump when the generated layout changes, so stale ``.complete`` markers are ignored.
_FORMAT_VERSION = 2  # 2: parquet_info keyed as BAGEL reads it


def _write_parquet(out: Path, schema: pa.Schema, p: ParquetSizes, make_row: Callable[[bool], dict]) -> None:
    out.mkdir(parents=True)
    for f in range(p.files):
        with pq.ParquetWriter(out / f"part-{f:05d}.parquet", schema) as writer:
            for g in range(p.row_groups):
                batch = [make_row(f == g == r == 0) for r in range(p.rows_per_group)]
                writer.write_table(pa.Table.from_pylist(batch, schema=schema), row_group_size=len(batch))


def _t2i_row(rng: np.random.Generator, p: ParquetSizes, first: bool) -> dict:
    scene = text.random_scene(rng)
    img = photo_like_image(rng, *p.image.draw(rng))
    n = p.per_row[1] if first else int(rng.integers(p.per_row[0], p.per_row[1] + 1))  # row 0: many captions
    fmt = "PNG" if rng.random() < 0.1 else "JPEG"
    return {
        "image": encode_image(img, fmt, quality=int(rng.integers(80, 96))),
        "captions": json.dumps(text.captions(rng, scene, n), ensure_ascii=False),
    }


def _edit_row(rng: np.random.Generator, p: ParquetSizes) -> dict:
    scene = text.random_scene(rng)
    width, height = p.image.draw(rng)
    img = smooth_scene(rng, *scene_size(width, height))
    images, instructions = [encode_image(Image.fromarray(finish_picture(rng, img, width, height)))], []
    for _ in range(int(rng.integers(p.per_row[0], p.per_row[1] + 1)) - 1):
        kind, color = text.pick(rng, ("add", "tint")), text.pick(rng, text.COLORS)
        rgb = np.asarray(text.COLOR_RGB[color], dtype=np.float32)
        img = img.copy()  # each step edits the previous result, as in a real edit chain
        if kind == "add":
            paint_shape(rng, img, rgb)
        else:
            img = img * 0.7 + rgb * 0.3
        images.append(encode_image(Image.fromarray(finish_picture(rng, img, width, height))))
        instructions.append(text.edit_instructions(rng, kind, scene, color))
    return {"image_list": images, "instruction_list": instructions}


def _fingerprint(sizes: DemoSizes, seed: int) -> str:
    blob = json.dumps({"v": _FORMAT_VERSION, "seed": seed, "sizes": dataclasses.asdict(sizes)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def write_demo_dataset(root: Path, sizes: DemoSizes = DemoSizes.demo(), seed: int = 0) -> DemoPaths:
    """Write the T2I, edit and VLM datasets plus dataset_info.yaml and grouped_datasets.yaml.

    Returns at once when ``root/.complete`` records the same sizes and seed; otherwise
    the generated folders are replaced. The marker is written last, so an interrupted
    run is redone next time."""
    root = Path(root).resolve()
    paths = DemoPaths(
        root,
        root / "dataset_info.yaml",
        root / "grouped_datasets.yaml",
        root / "t2i",
        root / "edit",
        root / "vlm" / "train.jsonl",
        root / "vlm" / "images",
    )
    marker, stamp = root / ".complete", _fingerprint(sizes, seed)
    if marker.is_file() and marker.read_text() == stamp:
        return paths
    marker.unlink(missing_ok=True)
    for old in (paths.t2i_dir, paths.edit_dir, root / "vlm"):
        shutil.rmtree(old, ignore_errors=True)  # stale parts of an earlier, larger run would be read too
    # Independent child streams: resizing one dataset leaves the others' bytes unchanged.
    t2i_rng, edit_rng, vlm_rng = np.random.default_rng(seed).spawn(3)
    _write_parquet(paths.t2i_dir, T2I_SCHEMA, sizes.t2i, lambda first: _t2i_row(t2i_rng, sizes.t2i, first))
    _write_parquet(paths.edit_dir, EDIT_SCHEMA, sizes.edit, lambda _: _edit_row(edit_rng, sizes.edit))
    # Keyed by data_dir joined with each name, exactly as dataset_info's data_dir says:
    # the key BAGEL's own reader looks each file up by.
    write_parquet_info(paths.edit_dir, data_dir=str(paths.edit_dir))
    write_vlm(vlm_rng, paths.vlm_jsonl, paths.vlm_image_dir, sizes.vlm)
    write_configs(paths, sizes)
    marker.write_text(stamp)
    return paths
