"""Tiny on-disk datasets for the family tests: plain functions, no fixtures.

* `write_t2i(folder, files)`: parquet files with `image` (binary) / `captions` (string);
  `files` is a list (one entry per file) of row groups, each a list of row dicts.
* `write_edit(folder, files)`: parquet files with `image_list` / `instruction_list`, plus a
  `parquet_info.json` computed from the written files.
* `write_vlm(folder, rows, images)`: `train.jsonl` and an image folder.
* `solid_jpeg`, `png_bytes`, `write_video`: encoded media.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from bagel_data.formats import EDIT_SCHEMA, T2I_SCHEMA, column_types

T2I_TYPES = column_types(T2I_SCHEMA)
EDIT_TYPES = column_types(EDIT_SCHEMA)


# -- media -------------------------------------------------------------------------------
def encode(image: Image.Image, fmt: str = "PNG", **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **params)
    return buffer.getvalue()


def solid_jpeg(w: int, h: int, color=(128, 128, 128)) -> bytes:
    return encode(Image.new("RGB", (w, h), tuple(color)), "JPEG", quality=95)


def png_bytes(w: int, h: int, color=(128, 128, 128), mode: str = "RGB") -> bytes:
    """A solid PNG; `color` must suit `mode` (an int for "L", a 4-tuple for "RGBA")."""
    return encode(Image.new(mode, (w, h), color), "PNG")


def write_video(path, num_frames: int = 12, size=(32, 24), rate: int = 4) -> str:
    """A short mpeg4 file whose frame i is a solid grey of intensity 10 * i."""
    import av

    width, height = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.bit_rate = 2_000_000
        for i in range(num_frames):
            pixels = np.full((height, width, 3), 10 * i, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


# -- parquet -----------------------------------------------------------------------------
def _cell(name: str, value):
    if name == "captions" and isinstance(value, Mapping):
        return json.dumps(dict(value))
    return value


def write_parquet(path, row_groups: Sequence[Sequence[Mapping]], types: Mapping[str, pa.DataType]) -> str:
    """One parquet file with exactly one row group per entry of `row_groups`.

    The columns are the keys of the first row (typed from `types`, else inferred), so a
    test can leave a column out on purpose.
    """
    first = next(row for group in row_groups for row in group)
    fields = [pa.field(name, types.get(name) or pa.infer_type([first[name]])) for name in first]
    schema = pa.schema(fields)
    with pq.ParquetWriter(str(path), schema) as writer:
        for group in row_groups:
            columns = {f.name: [_cell(f.name, row[f.name]) for row in group] for f in fields}
            table = pa.table(columns, schema=schema)
            writer.write_table(table, row_group_size=max(len(group), 1))
    return str(path)


def _names(files: Sequence, names: Sequence[str] | None) -> list[str]:
    if names is None:
        return [f"part-{i:03d}.parquet" for i in range(len(files))]
    assert len(names) == len(files)
    return list(names)


def write_t2i(folder, files: Sequence[Sequence[Sequence[Mapping]]], names: Sequence[str] | None = None) -> list[str]:
    """T2I parquet files in `folder`; a row is `{"image": bytes, "captions": dict | str}`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return [write_parquet(folder / name, groups, T2I_TYPES) for name, groups in zip(_names(files, names), files)]


SMALL_VAE = {"image_stride": 16, "max_image_size": 64, "min_image_size": 16}


def t2i_run_config(
    folder, files: Sequence[Sequence[Sequence[Mapping]]], *, budget: int, num_used_data: int = 1,
    group: Mapping | None = None, packing: Mapping | None = None,
):  # fmt: skip
    """A run config of one T2I group over `files` (written to `folder` as `write_t2i` does),
    small VAE images, and budgets from `budget` (per sample and expected; twice it a pack).
    `group` and `packing` add or override keys."""
    from bagel_data.tools.run import RunConfig

    write_t2i(folder, files)
    grouped = {
        "t2i_pretrain": {
            "dataset_names": ["t2i"], "image_transform_args": SMALL_VAE, "num_used_data": [num_used_data],
            "weight": 1, **(group or {}),
        }
    }  # fmt: skip
    info = {"t2i_pretrain": {"t2i": {"data_dir": str(folder), "num_files": len(files)}}}
    budgets = {"expected_num_tokens": budget, "max_num_tokens": 2 * budget, "max_num_tokens_per_sample": budget,
               "prefer_buffer_before": budget}  # fmt: skip
    return RunConfig(grouped, info, {**budgets, **(packing or {})})


def write_edit(
    folder,
    files: Sequence[Sequence[Sequence[Mapping]]],
    names: Sequence[str] | None = None,
    absolute_keys: bool = False,
) -> tuple[list[str], dict]:
    """Edit parquet files in `folder` and `folder/parquet_info.json`.

    A row is `{"image_list": [bytes, ...], "instruction_list": [[str, ...], ...]}`. The info
    is keyed by file name relative to `folder` (or by full path with `absolute_keys`).
    Returns (paths, parquet_info).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [write_parquet(folder / name, groups, EDIT_TYPES) for name, groups in zip(_names(files, names), files)]
    info = {}
    for path in paths:
        meta = pq.ParquetFile(path).metadata
        key = path if absolute_keys else os.path.relpath(path, folder)
        info[key] = {"num_row_groups": meta.num_row_groups, "num_rows": meta.num_rows}
    (folder / "parquet_info.json").write_text(json.dumps(info))
    return paths, info


# -- jsonl -------------------------------------------------------------------------------
def write_vlm(folder, rows: Sequence, images: Mapping[str, bytes] | None = None) -> tuple[str, str]:
    """`folder/train.jsonl` (a dict row is JSON-encoded, a str row written as is) and the
    files of `images` under `folder/images`. Returns (jsonl path, image folder)."""
    folder = Path(folder)
    image_dir = folder / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    for name, data in (images or {}).items():
        (image_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (image_dir / name).write_bytes(data)
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    jsonl = folder / "train.jsonl"
    jsonl.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(jsonl), str(image_dir)


def write_tars(folder, sizes: Sequence[int]) -> Path:
    """WebDataset tars in `folder`: tar t holds `sizes[t]` samples (a 16x16 `.jpg` and a
    `.txt` captioned `t<t> s<s>`, keyed `<tar>/<sample>`). Returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    image = solid_jpeg(16, 16)
    for tar, count in enumerate(sizes):
        with tarfile.open(folder / f"{tar:05d}.tar", "w") as archive:
            for sample in range(count):
                for ext, data in ((".jpg", image), (".txt", f"t{tar} s{sample}".encode())):
                    info = tarfile.TarInfo(f"{tar:05d}/{sample:04d}{ext}")
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))
    return folder
