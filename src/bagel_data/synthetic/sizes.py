"""How much synthetic data to write and how large its pictures are (`DemoSizes`), with the
two presets: `DemoSizes.demo()` (seconds on two cores) and `DemoSizes.bench()` (realistic)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
