"""Synthetic datasets in the BAGEL on-disk formats, for the demo, tests and benchmark.

All randomness flows from one ``numpy.random.default_rng(seed)``; global RNGs are
never touched, so generation is reproducible byte for byte.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from PIL import Image

from ..formats import EDIT_SCHEMA, T2I_SCHEMA
from . import text
from .images import (
    encode_image,
    finish_picture,
    paint_shape,
    photo_like_image,
    scene_size,
    smooth_scene,
)

# Bump when the generated layout changes, so stale ``.complete`` markers are ignored.
_FORMAT_VERSION = 1
DATASET_NAMES = {"t2i_pretrain": "t2i", "unified_edit": "edit", "vlm_sft": "vlm"}
# The file format each VLM image mode is stored in (JPEG cannot hold alpha or palettes).
_MODE_FORMATS = {"RGB": "JPEG", "RGBA": "PNG", "L": "PNG", "P": "PNG", "CMYK": "JPEG"}


@dataclass(frozen=True)
class ImageSize:
    """Picture sizes: area log-uniform in [min_pixels, max_pixels], long/short side
    ratio up to ``max_aspect`` (either orientation), sides clipped to [min_side, max_side]."""

    min_pixels: int
    max_pixels: int
    max_aspect: float
    min_side: int
    max_side: int

    def draw(self, rng: np.random.Generator) -> tuple[int, int]:
        area = np.exp(rng.uniform(np.log(self.min_pixels), np.log(self.max_pixels)))
        aspect = np.exp(rng.uniform(-np.log(self.max_aspect), np.log(self.max_aspect)))
        side = lambda v: int(np.clip(round(float(v)), self.min_side, self.max_side))  # noqa: E731
        return side(np.sqrt(area * aspect)), side(np.sqrt(area / aspect))


@dataclass(frozen=True)
class TransformSizes:
    """Image transform and frame sampler settings written to grouped_datasets.yaml."""

    vae: tuple[int, int, int]  # image_stride, max_image_size, min_image_size
    vit: tuple[int, int, int]
    vlm: tuple[int, int, int, int]  # ... plus max_pixels
    frames: tuple[int, int]  # max_num_frames, min_num_frames


@dataclass(frozen=True)
class ParquetSizes:
    """Files x row groups x rows of one parquet dataset, and its picture sizes."""

    files: int
    row_groups: int
    rows_per_group: int
    image: ImageSize
    per_row: tuple[int, int]  # inclusive range: captions per T2I row, images per edit chain

    @property
    def rows(self) -> int:
        return self.files * self.row_groups * self.rows_per_group


@dataclass(frozen=True)
class VlmSizes:
    """Rows and media of the VLM SFT jsonl."""

    rows: int
    image: ImageSize
    video_rows: int  # rows for each of: the .mp4 clip, the frame folder
    video_size: tuple[int, int]  # (width, height); even, for yuv420p
    video_frames: int
    folder_frames: tuple[int, int]  # inclusive range of frames in clip_0/


@dataclass(frozen=True)
class DemoSizes:
    """How much synthetic data to write, how large its pictures are, and the transforms."""

    t2i: ParquetSizes
    edit: ParquetSizes
    vlm: VlmSizes
    transforms: TransformSizes

    @classmethod
    def demo(cls) -> DemoSizes:
        """Small: a few seconds on two cores; transforms scaled down so packing is quick."""
        return cls(
            t2i=ParquetSizes(3, 2, 8, ImageSize(160 * 240, 480 * 640, 2.5, 160, 640), (1, 4)),
            edit=ParquetSizes(2, 2, 4, ImageSize(160 * 200, 384 * 512, 2.0, 160, 512), (2, 3)),
            vlm=VlmSizes(40, ImageSize(96 * 128, 480 * 640, 3.0, 96, 640), 2, (128, 96), 16, (10, 16)),
            transforms=TransformSizes((16, 512, 256), (14, 378, 224), (14, 490, 224, 490 * 490), (8, 4)),
        )

    @classmethod
    def bench(cls) -> DemoSizes:
        """Realistic: ~1 MP T2I images, 0.5-1 MP edit chains, BAGEL's default transforms."""
        return cls(
            t2i=ParquetSizes(4, 4, 16, ImageSize(850_000, 1_150_000, 1.5, 512, 1536), (2, 4)),
            edit=ParquetSizes(2, 4, 8, ImageSize(500_000, 1_000_000, 1.5, 512, 1400), (2, 3)),
            vlm=VlmSizes(200, ImageSize(100_000, 900_000, 2.0, 224, 1600), 4, (256, 192), 24, (16, 24)),
            transforms=TransformSizes((16, 1024, 512), (14, 518, 224), (14, 980, 378, 2007040), (12, 8)),
        )


@dataclass(frozen=True)
class DemoPaths:
    """Where :func:`write_demo_dataset` put things (all absolute)."""

    root: Path
    dataset_info: Path
    grouped_datasets: Path
    t2i_dir: Path
    edit_dir: Path
    vlm_jsonl: Path
    vlm_image_dir: Path

    @property
    def parquet_info(self) -> Path:
        return self.edit_dir / "parquet_info.json"


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


def _pan_frames(rng: np.random.Generator, width: int, height: int, count: int) -> list[np.ndarray]:
    """Frames of a slow camera pan across one wide picture."""
    step = max(1, width // 32)
    full = width + step * (count - 1)
    pano = finish_picture(rng, smooth_scene(rng, *scene_size(full, height)), full, height)
    return [np.ascontiguousarray(pano[:, i * step : i * step + width]) for i in range(count)]


def _write_videos(rng: np.random.Generator, image_dir: Path, v: VlmSizes) -> None:
    """``clip_0.mp4`` (mpeg4, yuv420p) and the frame folder ``clip_0/frame_<n>.jpg`` (n from 1)."""
    with av.open(str(image_dir / "clip_0.mp4"), "w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=8)
        stream.width, stream.height = v.video_size
        stream.pix_fmt = "yuv420p"
        for arr in _pan_frames(rng, *v.video_size, v.video_frames):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")))
        container.mux(stream.encode())
    (image_dir / "clip_0").mkdir()
    count = int(rng.integers(v.folder_frames[0], v.folder_frames[1] + 1))
    for i, arr in enumerate(_pan_frames(rng, *v.video_size, count), start=1):
        (image_dir / "clip_0" / f"frame_{i}.jpg").write_bytes(encode_image(Image.fromarray(arr)))


def _write_vlm_image(rng: np.random.Generator, image_dir: Path, v: VlmSizes, k: int) -> str:
    # The first five images cover every mode; after that mostly RGB, like real data.
    modes = tuple(_MODE_FORMATS)
    mode = modes[k] if k < len(modes) else modes[int(rng.choice(5, p=(0.6, 0.1, 0.1, 0.1, 0.1)))]
    fmt = _MODE_FORMATS[mode]
    name = f"shard_{k // 32:02d}/{k:05d}.{'jpg' if fmt == 'JPEG' else 'png'}"
    (image_dir / name).parent.mkdir(exist_ok=True)
    (image_dir / name).write_bytes(encode_image(photo_like_image(rng, *v.image.draw(rng), mode), fmt))
    return name


def _write_vlm(rng: np.random.Generator, jsonl: Path, image_dir: Path, v: VlmSizes) -> None:
    image_dir.mkdir(parents=True)
    _write_videos(rng, image_dir, v)
    text_only = max(1, v.rows // 8)
    rest = v.rows - text_only - 2 * v.video_rows
    if rest < 0:
        raise ValueError(f"{v.rows} VLM rows cannot hold {2 * v.video_rows} video and {text_only} text rows")
    kinds = ["mp4", "frames"] * v.video_rows + ["text"] * text_only + ["two"] * (rest // 3)
    kinds += ["one"] * (rest - rest // 3)
    n_images = n_single = 0
    with jsonl.open("w", encoding="utf-8") as out:
        for i, j in enumerate(rng.permutation(len(kinds))):
            kind = kinds[j]
            row: dict[str, object] = {"id": f"vlm_{i:05d}"}
            count = {"one": 1, "two": 2}.get(kind, 0)
            if kind in ("mp4", "frames"):
                row["video"] = "clip_0.mp4" if kind == "mp4" else "clip_0/"
            elif count:
                names = [_write_vlm_image(rng, image_dir, v, n_images + c) for c in range(count)]
                n_images += count
                # The spec allows a bare string for one image; use both spellings.
                row["image"] = names[0] if count == 1 and rng.random() < 0.5 else names
            placement = ("prefix", "inline", "suffix")[n_single % 3]  # cycled so each one occurs
            n_single += kind == "one"
            row["conversations"] = text.conversation(
                rng, count, kind in ("mp4", "frames"), int(rng.integers(1, 4)), placement
            )
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def _transform(args: tuple[int, ...]) -> dict[str, int]:
    return dict(zip(("image_stride", "max_image_size", "min_image_size", "max_pixels"), args))


def _write_configs(paths: DemoPaths, s: DemoSizes) -> None:
    t2i, edit, vlm = DATASET_NAMES.values()
    info = {
        "t2i_pretrain": {
            t2i: {"data_dir": str(paths.t2i_dir), "num_files": s.t2i.files, "num_total_samples": s.t2i.rows}
        },
        "unified_edit": {
            edit: {
                "data_dir": str(paths.edit_dir),
                "num_files": s.edit.files,
                "num_total_samples": s.edit.rows,
                "parquet_info_path": str(paths.parquet_info),
            }
        },
        "vlm_sft": {
            vlm: {
                "data_dir": str(paths.vlm_image_dir),
                "jsonl_path": str(paths.vlm_jsonl),
                "num_files": 1,
                "num_total_samples": s.vlm.rows,
            }
        },
    }
    tr = s.transforms
    groups = {
        "t2i_pretrain": {
            "dataset_names": [t2i],
            "image_transform_args": _transform(tr.vae),
            "is_mandatory": True,
            "num_used_data": [s.t2i.files],
            "weight": 0.5,
        },
        "unified_edit": {
            "dataset_names": [edit],
            "image_transform_args": _transform(tr.vae),
            "vit_image_transform_args": _transform(tr.vit),
            "is_mandatory": False,
            "num_used_data": [s.edit.files],
            "weight": 0.3,
        },
        "vlm_sft": {
            "dataset_names": [vlm],
            "image_transform_args": _transform(tr.vlm),
            "frame_sampler_args": {"max_num_frames": tr.frames[0], "min_num_frames": tr.frames[1]},
            "is_mandatory": False,
            "shuffle_lines": True,
            "shuffle_seed": 0,
            "num_used_data": [s.vlm.rows],
            "weight": 0.2,
        },
    }
    paths.dataset_info.write_text(yaml.safe_dump(info, sort_keys=False))
    paths.grouped_datasets.write_text(yaml.safe_dump(groups, sort_keys=False))


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
    meta = {p.name: pq.read_metadata(p) for p in sorted(paths.edit_dir.glob("*.parquet"))}
    paths.parquet_info.write_text(
        json.dumps(
            {name: {"num_row_groups": m.num_row_groups, "num_rows": m.num_rows} for name, m in meta.items()}, indent=2
        )
    )
    _write_vlm(vlm_rng, paths.vlm_jsonl, paths.vlm_image_dir, sizes.vlm)
    _write_configs(paths, sizes)
    marker.write_text(stamp)
    return paths
