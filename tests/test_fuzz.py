"""Mutation fuzzing: flipped, inserted and truncated bytes of small valid images (every
format Pillow opens here) and of a small parquet file. Every input must give a sample or
exactly one named skip; nothing may escape as an exception.

CI runs a small budget (a few seconds). For a larger run:
`BAGEL_FUZZ_EXAMPLES=5000 pytest tests/test_fuzz.py` (mutants per format; the seed is fixed,
`BAGEL_FUZZ_SEED` changes it).
"""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bagel_data import ImageTransform, T2IIterableDataset
from bagel_data.errors import SkipLog, SkipReason
from bagel_data.families.samples import guarded
from helpers.builders import write_t2i

EXAMPLES = int(os.environ.get("BAGEL_FUZZ_EXAMPLES", "25"))
SEED = int(os.environ.get("BAGEL_FUZZ_SEED", "15"))
IMAGE_REASONS = {SkipReason.IMAGE_DECODE.value, SkipReason.IMAGE_TOO_LARGE.value}
TRANSFORM = ImageTransform(64, 32, 16)


def small_image(fmt: str) -> bytes:
    pixels = np.arange(24 * 20 * 3, dtype=np.uint8).reshape(20, 24, 3)
    image = Image.fromarray(pixels)
    if fmt == "GIF":
        image = image.convert("P")
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to three edits: flip a bit, overwrite, insert or delete a byte run, truncate."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("flip", "set", "insert", "delete", "truncate"))
        at = rng.randrange(max(len(out), 1))
        if kind == "flip" and out:
            out[at] ^= 1 << rng.randrange(8)
        elif kind == "set" and out:
            out[at] = rng.choice((0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif kind == "insert":
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif kind == "delete":
            del out[at : at + rng.randint(1, 8)]
        else:
            del out[at:]
    return bytes(out)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, tokenizer) -> T2IIterableDataset:
    folder = tmp_path_factory.mktemp("fuzz_t2i")
    write_t2i(folder, [[[{"image": small_image("PNG"), "captions": {"c": "x"}}]]])
    return T2IIterableDataset("fuzz", TRANSFORM, tokenizer, [str(folder)], [1], num_workers=1)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "TIFF", "WEBP", "BMP"])
def test_mutated_images_give_a_sample_or_one_named_skip(dataset, fmt):
    rng = random.Random(f"{SEED}-{fmt}")
    valid = small_image(fmt)
    for example in range(EXAMPLES):
        data = mutate(valid, rng)
        log = SkipLog("fuzz")
        where = f"{fmt} mutant {example}"
        cells = {"image": data, "captions": '{"c": "x"}'}
        builder = guarded(log, where, dataset.build_sample, cells, np.random.default_rng(0), where, log)
        if builder is None:
            assert log.total() == 1 and set(log.counts) <= IMAGE_REASONS, (where, log.examples)
        else:
            assert log.total() == 0, (where, log.examples)


def test_mutated_parquet_files_give_samples_or_named_skips(tmp_path, tokenizer):
    rows = [{"image": small_image("PNG"), "captions": {"c": f"caption {i}"}} for i in range(4)]
    source = tmp_path / "source"
    (path,) = write_t2i(source, [[rows[:2], rows[2:]]])
    valid = Path(path).read_bytes()
    rng = random.Random(f"{SEED}-parquet")
    known = {reason.value for reason in SkipReason}
    for example in range(max(EXAMPLES // 2, 5)):
        folder = tmp_path / f"m{example}"
        folder.mkdir()
        (folder / "part-000.parquet").write_bytes(mutate(valid, rng))
        dataset = T2IIterableDataset("fuzz", TRANSFORM, tokenizer, [str(folder)], [1], num_workers=1)
        log = SkipLog("fuzz")
        samples = list(dataset.iter_pass(log))
        assert set(log.counts) <= known, (example, log.examples)
        # A readable row is a sample or a skip; an unreadable file or row group is one skip.
        assert len(samples) + log.total() >= 1 or _declares_no_rows(folder), (example, log.examples)


def _declares_no_rows(folder) -> bool:
    import pyarrow.parquet as pq

    return pq.ParquetFile(folder / "part-000.parquet").metadata.num_rows == 0
