"""What `prepare` writes, module by module: JSONL shards and T2I captions kept as UTF-8
(`shard_jobs.py`, `t2i.py`), an output folder made with its parents (`shards.py`), and the
stored image bytes (`stored_images.py`): JPEG quality 95, a thin image's side kept at one
pixel under `max_side`."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from bagel_data.tools.prepare.report import RowDropped
from bagel_data.tools.prepare.shard_jobs import jsonl_bytes
from bagel_data.tools.prepare.shards import prepare_out_dir
from bagel_data.tools.prepare.stored_images import stored_image
from bagel_data.tools.prepare.t2i import numbered_captions


def test_jsonl_shards_keep_text_as_utf8_not_escapes():
    """The JSONL reader orders lines by their bytes: `\\u00e9` and `é` would sort apart."""
    assert jsonl_bytes([{"t": "café ☕"}, {"t": "x"}]) == '{"t": "café ☕"}\n{"t": "x"}\n'.encode()


def test_t2i_captions_are_numbered_once_each_and_kept_as_utf8():
    assert numbered_captions(["café", "a cat", "café"]) == '{"caption_1": "café", "caption_2": "a cat"}'
    with pytest.raises(RowDropped, match="no caption text"):
        numbered_captions([])


def test_an_output_folder_is_made_with_its_parents(tmp_path):
    made = prepare_out_dir(tmp_path / "runs" / "today" / "t2i", overwrite=False)
    assert made.is_dir() and made == tmp_path / "runs" / "today" / "t2i"


def test_a_jpeg_reencode_keeps_quality_95():
    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    png = io.BytesIO()
    Image.fromarray(pixels).save(png, format="PNG")
    expected = io.BytesIO()
    Image.fromarray(pixels).save(expected, format="JPEG", quality=95)
    assert stored_image(png.getvalue(), "noise.png", reencode="JPEG") == expected.getvalue()


@pytest.mark.parametrize(("size", "expected"), [((400, 2), (100, 1)), ((2, 400), (1, 100))])
def test_max_side_keeps_a_thin_side_at_one_pixel(size, expected):
    png = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(png, format="PNG")
    stored = stored_image(png.getvalue(), "thin.png", max_side=100)
    with Image.open(io.BytesIO(stored)) as image:
        assert image.size == expected
