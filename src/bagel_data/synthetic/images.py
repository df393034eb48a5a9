"""Photo-like synthetic pictures: smooth scenes, soft shapes, lighting and sensor grain.

Used by the synthetic datasets (`synthetic/dataset.py`) and by tests and the benchmark that need
realistic JPEGs. All randomness comes from the generator passed in.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

_SCENE_SIDE = 384


def _grid(width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    # A (1, W) and an (H, 1) axis: planes are only materialised when combined.
    return (np.linspace(0, 1, width, dtype=np.float32)[None, :], np.linspace(0, 1, height, dtype=np.float32)[:, None])


def paint_shape(rng: np.random.Generator, img: np.ndarray, color: np.ndarray | None = None) -> None:
    """Paint a soft-edged rectangle or ellipse in place."""
    x, y = _grid(img.shape[1], img.shape[0])
    cx, cy, rx, ry = (float(v) for v in rng.uniform((0.15, 0.15, 0.05, 0.05), (0.85, 0.85, 0.25, 0.25)))
    dx, dy = np.abs(x - cx) / rx, np.abs(y - cy) / ry
    d = np.maximum(dx, dy) if rng.random() < 0.5 else np.sqrt(dx * dx + dy * dy)
    # Steep sigmoid = a slightly soft edge; the clamp keeps float32 exp from overflowing.
    mask = 1.0 / (1.0 + np.exp(np.minimum((d - 1.0) * 30.0, 50.0)))
    if color is None:
        color = rng.uniform(0, 1, 3).astype(np.float32)
    img += (color - img) * mask[..., None]


def smooth_scene(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """The smooth part of a picture, H x W x 3 float32 in about [0, 1]: gradient, blobs, shapes, light."""
    x, y = _grid(width, height)
    angle = float(rng.uniform(0, 2 * np.pi))
    t = x * np.cos(angle) + y * np.sin(angle)
    t = (t - t.min()) / (float(t.max() - t.min()) + 1e-6)
    c0, c1 = rng.uniform(0.05, 0.95, (2, 3)).astype(np.float32)
    img = c0 + (c1 - c0) * t[..., None]
    for _ in range(int(rng.integers(3, 7))):
        cx, cy, sx, sy, k = (float(v) for v in rng.uniform((0, 0, 0.04, 0.04, 0.4), (1, 1, 0.3, 0.3, 0.9)))
        # Gaussians are separable: H + W exponentials instead of H * W.
        g = np.exp(-0.5 * ((y - cy) / sy) ** 2) * np.exp(-0.5 * ((x - cx) / sx) ** 2)
        img += (rng.uniform(0, 1, 3).astype(np.float32) - img) * (g * k)[..., None]
    for _ in range(int(rng.integers(1, 4))):
        paint_shape(rng, img)
    fx, fy, phase = (float(v) for v in rng.uniform((0.5, 0.5, 0), (3, 3, 2 * np.pi)))
    img *= (1.0 + 0.08 * np.sin(2 * np.pi * (fx * x + fy * y) + phase))[..., None]
    return img


def scene_size(width: int, height: int) -> tuple[int, int]:
    # The scene is smooth, so render it at most _SCENE_SIDE px and upsample (1 MP: ~70 ms, not ~220 ms).
    scale = min(1.0, _SCENE_SIDE / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def finish_picture(rng: np.random.Generator, scene: np.ndarray, width: int, height: int) -> np.ndarray:
    """Upsample a scene to width x height and add sensor-like grain; uint8 H x W x 3."""
    img = Image.fromarray(np.clip(scene * 255.0 + 0.5, 0, 255).astype(np.uint8), "RGB")
    if img.size != (width, height):
        img = img.resize((width, height), Image.Resampling.BICUBIC)
    grain = rng.integers(-5, 6, (height, width, 3), dtype=np.int16)
    return np.clip(np.asarray(img, dtype=np.int16) + grain, 0, 255).astype(np.uint8)


def _with_mode(rgb: np.ndarray, mode: str, palette_transparency: bool) -> Image.Image:
    img = Image.fromarray(rgb, "RGB")
    if mode == "RGB":
        return img
    if mode == "RGBA":
        # Opaque centre fading to fully transparent corners, like a cut-out sticker.
        x, y = _grid(rgb.shape[1], rgb.shape[0])
        g = np.exp(-0.5 * ((x - 0.5) / 0.3) ** 2) * np.exp(-0.5 * ((y - 0.5) / 0.3) ** 2)
        img.putalpha(Image.fromarray((np.clip((g - 0.2) * 2.0, 0, 1) * 255).astype(np.uint8), "L"))
        return img
    if mode == "P":
        pal = img.quantize(colors=64, method=Image.Quantize.FASTOCTREE)
        if palette_transparency:
            pal.info["transparency"] = pal.getpixel((0, 0))  # a colour that is really used
        return pal
    if mode in ("L", "CMYK"):
        return img.convert(mode)
    raise ValueError(f"unsupported mode {mode!r}")


def photo_like_image(
    rng: np.random.Generator, width: int, height: int, mode: str = "RGB", *, palette_transparency: bool = True
) -> Image.Image:
    """A photo-like picture in ``mode`` (RGB, RGBA, L, P or CMYK).

    RGBA gets a partly transparent alpha; P gets a transparency index unless
    ``palette_transparency`` is False."""
    scene = smooth_scene(rng, *scene_size(width, height))
    return _with_mode(finish_picture(rng, scene, width, height), mode, palette_transparency)


def encode_image(img: Image.Image, fmt: str = "JPEG", quality: int = 90) -> bytes:
    """Encode ``img`` as ``fmt``; alpha/palette images are flattened to RGB for JPEG."""
    fmt = "JPEG" if fmt.upper() == "JPG" else fmt.upper()
    if fmt == "JPEG" and img.mode not in ("RGB", "L", "CMYK"):
        img = img.convert("RGB")
    # Low PNG compression: synthetic noise barely compresses and level 6 is slow at 1 MP.
    options = {"compress_level": 1} if fmt == "PNG" else {"quality": quality}
    buf = io.BytesIO()
    img.save(buf, format=fmt, **options)
    return buf.getvalue()
