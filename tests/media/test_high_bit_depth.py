"""16-bit grayscale converts as a viewer shows it (scaled to 8 bits), not clipped to white."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from bagel_data.media.images import decode_image
from bagel_data.media.photos import high_bit_depth_to_8bit


def png16(values: np.ndarray, **params) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(values.astype(np.uint16)).save(buffer, format="PNG", **params)
    return buffer.getvalue()


def test_16_bit_png_is_scaled_not_clipped():
    values = np.array([[0, 257, 32896], [65535, 1000, 65278]], np.uint16)
    rgb = np.asarray(decode_image(png16(values)))
    assert rgb.shape == (2, 3, 3)
    # 257 * k in 16 bits is k in 8 bits: the hand-computed viewer levels.
    assert rgb[..., 0].tolist() == [[0, 1, 128], [255, 4, 254]]
    assert (rgb[..., 0] == rgb[..., 2]).all()


def test_mid_grey_16_bit_is_not_white():
    rgb = np.asarray(decode_image(png16(np.full((4, 4), 30000))))
    assert rgb.max() == rgb.min() == 117  # 30000 / 65535 * 255 = 116.7


@pytest.mark.parametrize("mode", ["I", "I;16"])
def test_integer_modes_in_memory(mode):
    image = Image.fromarray(np.array([[0, 65535, 70000, -5]], np.int32), "I")
    if mode == "I;16":
        image = Image.fromarray(np.array([[0, 65535, 65535, 0]], np.uint16))
    assert np.asarray(high_bit_depth_to_8bit(image)).tolist() == [[0, 255, 255, 0]]


def test_16_bit_transparency_value_is_composited_on_white():
    values = np.array([[0, 1000, 0]], np.uint16)
    rgb = np.asarray(decode_image(png16(values, transparency=1000)))
    assert rgb[0, :, 0].tolist() == [0, 255, 0]


def test_8_bit_modes_pass_through():
    image = Image.new("L", (2, 2), 7)
    assert high_bit_depth_to_8bit(image) is image
