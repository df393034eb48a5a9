"""T2I files of noise images, and one packed group over them: data whose reads can be told
apart, for the read-ahead and resume tests."""

from __future__ import annotations

import numpy as np
from PIL import Image

from bagel_data import ImageTransform, T2IIterableDataset
from bagel_data.packing.config import PackingConfig
from helpers.builders import encode, write_t2i
from helpers.fake_groups import one_group_packed


def noise_row(seed: int) -> dict:
    # Noise compresses badly and each row's differs (no dictionary sharing): each row group
    # is larger than the footer read (64 KiB from the end), so a row group's bytes are read
    # only when that row group is.
    pixels = np.random.default_rng(seed).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    return {"image": encode(Image.fromarray(pixels)), "captions": {"c": f"noisy picture {seed}"}}


def write_noise_t2i(folder) -> list[str]:
    """Three files of row groups of 3, 2 and 3 rows, every row a different image; their paths."""
    rows = iter(range(100))
    files = [[[noise_row(next(rows)) for _ in range(size)] for size in (3, 2, 3)] for _ in range(3)]
    return write_t2i(folder, files)


def noise_t2i_packed(folder, tokenizer, special_tokens, **settings):
    """One T2I group over the three files of `folder`, in packs of 60-80 tokens; `settings`
    change the packing config (read_ahead_bytes, pack_strategy, ...)."""
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(folder)], [3], num_workers=1)
    config = PackingConfig(expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70, **settings)
    return one_group_packed("t2i", family, config, special_tokens)
