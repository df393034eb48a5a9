"""The synthetic VLM SFT dataset: a JSONL of conversations over images in every mode, an
``.mp4`` clip and a frame folder, drawn from the generator it is given."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
from PIL import Image

from . import text
from .images import encode_image, finish_picture, photo_like_image, scene_size, smooth_scene
from .sizes import VlmSizes

# The file format each VLM image mode is stored in (JPEG cannot hold alpha or palettes).
_MODE_FORMATS = {"RGB": "JPEG", "RGBA": "PNG", "L": "PNG", "P": "PNG", "CMYK": "JPEG"}


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


def write_vlm(rng: np.random.Generator, jsonl: Path, image_dir: Path, v: VlmSizes) -> None:
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
