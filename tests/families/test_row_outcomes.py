"""Row outcomes that every family shares: the exact skip reason of an image whose header
declares too many pixels, and fresh frame draws for a video row on every pass."""

from __future__ import annotations

import itertools
import struct
import zlib

import pytest

from bagel_data.errors import SkipReason
from bagel_data.families.edit import UnifiedEditIterableDataset
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.families.vlm import SftJSONLIterableDataset
from bagel_data.media.images import DEFAULT_MAX_IMAGE_PIXELS, ImageTransform
from bagel_data.media.video import FrameSampler
from helpers.builders import png_bytes, write_edit, write_t2i, write_video, write_vlm

TRANSFORM = ImageTransform(32, 16, 16)
GOOD = png_bytes(16, 16, (90, 90, 90))


def huge_header_png(width: int = 20_000, height: int = 20_001) -> bytes:
    """A tiny PNG whose header claims `width` x `height` pixels (no pixel data to match)."""
    small = png_bytes(1, 1)
    ihdr_at = small.index(b"IHDR")
    fields = struct.pack(">II", width, height) + small[ihdr_at + 12 : ihdr_at + 17]
    chunk = b"IHDR" + fields
    patched = small[: ihdr_at - 4] + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    return patched + small[ihdr_at + 4 + 13 + 4 :]


def test_the_crafted_header_is_over_the_default_limit():
    data = huge_header_png()
    width, height = struct.unpack(">II", data[16:24])  # IHDR's fields follow the 8-byte signature
    assert width * height > DEFAULT_MAX_IMAGE_PIXELS


def _t2i(tmp_path, tokenizer):
    write_t2i(
        tmp_path, [[[{"image": huge_header_png(), "captions": {"a": "x"}}, {"image": GOOD, "captions": {"a": "y"}}]]]
    )
    return T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1], num_workers=1)


def _edit(tmp_path, tokenizer):
    bad = {"image_list": [GOOD, huge_header_png()], "instruction_list": [["make it big"]]}
    good = {"image_list": [GOOD, GOOD], "instruction_list": [["keep it"]]}
    _, info = write_edit(tmp_path, [[[bad, good]]])
    return UnifiedEditIterableDataset(
        "edit", TRANSFORM, tokenizer, TRANSFORM, [str(tmp_path)], [1], info, num_workers=1
    )


def _vlm(tmp_path, tokenizer):
    conv = [{"from": "human", "value": "<image> what is it?"}, {"from": "gpt", "value": "a picture"}]
    rows = [{"image": "huge.png", "conversations": conv}, {"image": "good.png", "conversations": conv}]
    jsonl, images = write_vlm(tmp_path, rows, {"huge.png": huge_header_png(), "good.png": GOOD})
    return SftJSONLIterableDataset("vlm", TRANSFORM, tokenizer, None, [jsonl], [images], [2], num_workers=1)


@pytest.mark.parametrize("build", [_t2i, _edit, _vlm], ids=["t2i", "edit", "vlm"])
def test_an_image_over_the_pixel_limit_is_skipped_for_that_reason(tmp_path, tokenizer, build):
    dataset = build(tmp_path, tokenizer)
    dataset.units.shuffle_buffer_size = 0  # rows in storage order: the bad row is passed first
    next(iter(dataset))  # the good row still comes through
    assert dict(dataset.skip_log.counts) == {SkipReason.IMAGE_TOO_LARGE.value: 1}


def test_a_video_row_draws_new_frames_on_every_pass(tmp_path, tokenizer):
    """The frame draw is keyed by the pass too: reading the only row of a dataset again
    must not repeat the first pass's frames every time."""
    conv = [{"from": "human", "value": "<video> what happens?"}, {"from": "gpt", "value": "it gets brighter"}]
    jsonl, folder = write_vlm(tmp_path, [{"video": "clip.mp4", "conversations": conv}])
    write_video(tmp_path / "images" / "clip.mp4", num_frames=20, size=(16, 16))
    sampler = FrameSampler(max_num_frames=4, min_num_frames=2)
    dataset = SftJSONLIterableDataset("vlm", TRANSFORM, tokenizer, sampler, [jsonl], [folder], [1], num_workers=1)
    passes = list(itertools.islice(iter(dataset), 6))
    greys = {tuple(round(float(t.mean()), 3) for t in sample["image_tensor_list"]) for sample in passes}
    assert len(greys) > 1, "every pass drew the same frames"
