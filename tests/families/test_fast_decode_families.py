"""fast_decode reaches the families: a large JPEG is decoded drafted, with the exact shapes."""

from __future__ import annotations

import numpy as np
from PIL import JpegImagePlugin

from bagel_data import ImageTransform, T2IIterableDataset
from bagel_data.errors import SkipLog
from bagel_data.synthetic.dataset import encode_image, photo_like_image
from helpers.builders import write_t2i


def first_image(folder, tokenizer, fast: bool):
    transform = ImageTransform(128, 64, 16, fast_decode=fast)
    dataset = T2IIterableDataset("t2i", transform, tokenizer, [str(folder)], [1], num_workers=1)
    _, sample = next(dataset.iter_pass(SkipLog("t2i")))
    return sample["image_tensor_list"][0]


def test_fast_decode_in_t2i_keeps_shapes_and_stays_close(tmp_path, tokenizer, monkeypatch):
    big = encode_image(photo_like_image(np.random.default_rng(0), 1024, 768), "JPEG", quality=92)
    write_t2i(tmp_path, [[[{"image": big, "captions": {"c": "a photo"}}]]])
    drafts = []
    original_draft = JpegImagePlugin.JpegImageFile.draft
    monkeypatch.setattr(
        JpegImagePlugin.JpegImageFile, "draft", lambda self, *a, **k: drafts.append(a) or original_draft(self, *a, **k)
    )
    exact = first_image(tmp_path, tokenizer, fast=False)
    assert drafts == [], "the exact mode never drafts"
    fast = first_image(tmp_path, tokenizer, fast=True)
    assert fast.shape == exact.shape
    assert (fast - exact).abs().mean() < 0.02
    assert drafts, "fast mode decoded a 1024 px JPEG for a 128 px target at full size"
