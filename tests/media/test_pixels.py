"""`pixel_format: uint8`: bytes + mean / std in the batch, and `normalize_pixels` gives the
float32 batch of the default format bit for bit (conformance cases in tests/packing/)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from bagel_data.batch import SimpleCustomBatch
from bagel_data.errors import ConfigError
from bagel_data.media.convert import PendingImage
from bagel_data.media.images import pending_image
from bagel_data.media.pixels import normalize_pixels, pad_pixels, raw_pixel_problem, stack_pixel_patches
from bagel_data.packing.buffers import PadBufferPool
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.layout import patchify
from bagel_data.packing.pack import pad_images, stack_patches

MEANS_STDS = [
    ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),  # BAGEL's: the float path takes its two-step shortcut
    ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),  # per channel: three steps, per-column ViT rows
    ((0.0, 0.1, 1.0 / 3.0), (1.0, 0.3, 0.7)),
]


def image(height: int, width: int, seed: int, mean_std, strided: bool = False) -> PendingImage:
    """Pixels holding every level, as an array or (strided) through Pillow's RGBX storage."""
    rng = np.random.default_rng(seed)
    pixels = rng.permutation(np.resize(np.arange(256, dtype=np.uint8), height * width * 3)).reshape(height, width, 3)
    if strided:
        return pending_image(Image.fromarray(pixels), *mean_std)
    return PendingImage(pixels, *mean_std)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit: `torch.equal` alone would take -0.0 for 0.0."""
    return a.dtype == b.dtype == torch.float32 and torch.equal(a.cpu().view(torch.int32), b.cpu().view(torch.int32))


def vae_pair(images, pool_raw=None, pool_float=None):
    raw = pad_pixels(images, pool_raw)
    return raw, pad_images(images, pool_float)


def test_bytes_and_side_tensors_have_the_documented_layout():
    images = [image(32, 48, 0, MEANS_STDS[1]), image(64, 16, 1, MEANS_STDS[0])]
    raw = pad_pixels(images)
    assert raw["padded_images"].dtype == torch.uint8 and raw["padded_images"].shape == (2, 3, 64, 48)
    assert torch.equal(raw["padded_images"][0, :, :32, :48], torch.from_numpy(images[0].pixels).permute(2, 0, 1))
    assert not raw["padded_images"][0, :, 32:].any() and not raw["padded_images"][1, :, :, 16:].any()
    assert raw["padded_images_sizes"].tolist() == [[32, 48], [64, 16]]
    assert torch.equal(raw["padded_images_mean"], torch.tensor([MEANS_STDS[1][0], MEANS_STDS[0][0]]))
    assert torch.equal(raw["padded_images_std"], torch.tensor([MEANS_STDS[1][1], MEANS_STDS[0][1]]))


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("reuse", [False, True])
def test_normalized_vae_bytes_equal_the_float_path(strided, reuse):
    sizes = [(48, 80), (112, 32), (16, 16), (112, 96)]
    images = [image(h, w, i, MEANS_STDS[i % 3], strided) for i, (h, w) in enumerate(sizes)]
    pools = (PadBufferPool(shared=False), PadBufferPool(shared=False)) if reuse else (None, None)
    if reuse:  # a dirty pooled buffer, released: its padding must be cleared again
        for pool, dtype in zip(pools, (torch.uint8, torch.float32)):
            buffer, _ = pool.float32((4, 3, 1024, 1024), dtype=dtype)
            buffer.fill_(7)
            del buffer
    raw, expected = vae_pair(images, *pools)
    assert raw["padded_images"].nbytes * 4 == expected.nbytes
    batch = normalize_pixels(dict(raw))
    assert set(batch) == {"padded_images"}
    assert same_bits(batch["padded_images"], expected)


@pytest.mark.parametrize("strided", [False, True])
def test_normalized_vit_bytes_equal_the_float_path(strided):
    images = [image(14 * h, 14 * w, i, MEANS_STDS[i % 3], strided) for i, (h, w) in enumerate([(2, 3), (5, 1), (4, 4)])]
    parts = [patchify(one, 14) for one in images]
    raw = stack_pixel_patches(parts)
    assert raw["packed_vit_tokens"].dtype == torch.uint8 and raw["packed_vit_tokens_mean"].shape == (3, 3)
    expected = stack_patches(parts)
    seqlens = torch.tensor([len(part) for part in parts])
    batch = normalize_pixels({**raw, "vit_token_seqlens": seqlens})
    assert set(batch) == {"packed_vit_tokens", "vit_token_seqlens"}
    assert same_bits(batch["packed_vit_tokens"], expected)


means = st.tuples(*[st.floats(-2.0, 2.0)] * 3)
stds = st.tuples(*[st.floats(1e-3, 4.0)] * 3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mean_std=st.lists(st.tuples(means, stds), min_size=1, max_size=3),
    sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=3, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_any_mean_and_std_normalize_to_the_float_path(mean_std, sizes, seed):
    images = [image(14 * h, 14 * w, seed + i, mean_std[i % len(mean_std)]) for i, (h, w) in enumerate(sizes)]
    raw, expected = vae_pair(images)
    assert same_bits(normalize_pixels(raw)["padded_images"], expected)
    parts = [patchify(one, 14) for one in images]
    seqlens = torch.tensor([len(part) for part in parts])
    tokens = normalize_pixels({**stack_pixel_patches(parts), "vit_token_seqlens": seqlens})["packed_vit_tokens"]
    assert same_bits(tokens, stack_patches(parts))


def test_a_float_tensor_image_is_a_config_error_naming_pixel_format():
    with pytest.raises(ConfigError, match="pixel_format"):
        pad_pixels([torch.zeros(3, 16, 16)])
    with pytest.raises(ConfigError, match="ImageTransform.prepare"):
        stack_pixel_patches([torch.zeros(4, 588)])


def test_raw_pixel_problem_names_a_missing_or_wrong_side_tensor():
    raw = pad_pixels([image(16, 16, 0, MEANS_STDS[0])])
    assert raw_pixel_problem(raw) is None
    assert "padded_images_sizes" in raw_pixel_problem({k: v for k, v in raw.items() if k != "padded_images_sizes"})
    assert "rows" in raw_pixel_problem({**raw, "padded_images_mean": torch.zeros(2, 3)})
    assert "not uint8" in raw_pixel_problem({**raw, "padded_images": raw["padded_images"].float()})
    with pytest.raises(KeyError, match="padded_images_std"):
        normalize_pixels({k: v for k, v in raw.items() if k != "padded_images_std"})


def test_the_setting_is_checked_at_construction():
    assert PackingConfig().pixel_format == "float32"
    with pytest.raises(ConfigError, match="pixel_format"):
        PackingConfig(pixel_format="uint16")


def test_simple_custom_batch_normalizes_in_place_and_guards_to_dict():
    images = [image(32, 16, 0, MEANS_STDS[2]), image(16, 48, 1, MEANS_STDS[0])]
    fields = {"sequence_length": 3, "batch_data_indexes": [], **pad_pixels(images)}
    batch = SimpleCustomBatch([fields])
    with pytest.raises(ValueError, match="normalize_pixels"):
        batch.to_dict()
    assert set(batch.to_dict(raw=True)) == set(fields)
    assert batch.cuda("cpu").normalize_pixels() is batch
    out = batch.to_dict()
    assert set(out) == {"sequence_length", "batch_data_indexes", "padded_images"}
    assert not hasattr(batch, "padded_images_mean")
    assert same_bits(out["padded_images"], pad_images(images))
    assert batch.normalize_pixels().to_dict()["padded_images"] is out["padded_images"]  # float: unchanged


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_normalizing_on_cuda_gives_the_cpu_float_path():
    images = [image(14 * h, 14 * w, i, MEANS_STDS[i % 3]) for i, (h, w) in enumerate([(40, 70), (73, 20), (8, 8)])]
    raw, expected = vae_pair(images)
    got = normalize_pixels({k: v.cuda() for k, v in raw.items()})["padded_images"]
    assert got.is_cuda and same_bits(got, expected)
    parts = [patchify(one, 14) for one in images]
    seqlens = torch.tensor([len(part) for part in parts])
    raw_tokens = {**stack_pixel_patches(parts), "vit_token_seqlens": seqlens}
    tokens = normalize_pixels({k: v.cuda() for k, v in raw_tokens.items()})["packed_vit_tokens"]
    assert same_bits(tokens, stack_patches(parts))


def test_a_reused_buffer_pads_with_zero_bytes():
    """The documented layout holds in a pooled buffer another pack has written: bytes past
    each image are 0, whatever was there (normalize_pixels masks them, a user may not)."""
    pool = PadBufferPool(shared=False)
    dirty, _ = pool.float32((4, 3, 1024, 1024), dtype=torch.uint8)  # large enough to be pooled
    dirty.fill_(7)
    del dirty
    raw = pad_pixels([image(512, 640, 0, MEANS_STDS[1]), image(640, 320, 1, MEANS_STDS[0])], pool)
    padded = raw["padded_images"]
    assert padded.shape == (2, 3, 640, 640)
    assert not padded[0, :, 512:].any() and not padded[1, :, :, 320:].any()
