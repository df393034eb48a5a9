"""Photos as users have them (issue 37): each case in both modes, on images made here.

The default mode gives what a viewer shows (upright, in sRGB, alpha on white, 16-bit
scaled); `as_reference` (compat="bagel") gives what the reference's `pil_img2rgb` gives,
which is checked against the reference's own steps written out: composite RGBA / a
`transparency` entry on white, else Pillow's `convert("RGB")`.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image

from bagel_data.errors import SkipLog
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.fast_decode import ORIGINAL_SIZE_KEY
from bagel_data.media.images import ImageTransform, decode_image
from bagel_data.media.photos import exif_orientation, in_srgb
from helpers.builders import encode, write_t2i
from helpers.photos import animated, cmyk_jpeg, cmyk_press_profile, linear_rgb_profile, oriented_jpeg, png16, ycck_jpeg


def reference_steps(data: bytes) -> np.ndarray:
    """The reference's decode, step by step: `Image.open`, then its `pil_img2rgb` rule."""
    image = Image.open(io.BytesIO(data))
    if image.mode == "RGBA" or image.info.get("transparency", None) is not None:
        rgba = image.convert("RGBA")
        white = Image.new("RGB", rgba.size, (255, 255, 255))
        white.paste(rgba, mask=rgba.split()[3])
        return np.asarray(white)
    return np.asarray(image.convert("RGB"))


def both(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(default mode, compat mode) pixels; the compat ones equal the reference's steps."""
    viewer = np.asarray(decode_image(data))
    reference = np.asarray(decode_image(data, as_reference=True))
    np.testing.assert_array_equal(reference, reference_steps(data))
    return viewer, reference


def marked(height: int, width: int) -> np.ndarray:
    """Black pixels with a white top-left corner: where it lands tells the turn."""
    pixels = np.zeros((height, width, 3), np.uint8)
    pixels[:8, :8] = 255
    return pixels


# -- EXIF orientation ------------------------------------------------------------------------
# orientation -> where the stored top-left corner is seen, as (row, column) of the upright image
SEEN_AT = {1: (0, 0), 2: (0, -1), 3: (-1, -1), 4: (-1, 0), 5: (0, 0), 6: (0, -1), 7: (-1, -1), 8: (-1, 0)}


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_turned_upright_by_default_and_kept_as_stored_in_compat(orientation):
    data = oriented_jpeg(marked(32, 48), orientation)
    viewer, reference = both(data)
    upright_shape = (48, 32) if orientation >= 5 else (32, 48)
    assert viewer.shape[:2] == upright_shape
    row, col = SEEN_AT[orientation]
    assert viewer[row, col].min() > 200 and viewer[-1 - row, -1 - col].max() < 50
    assert reference.shape[:2] == (32, 48) and reference[0, 0].min() > 200


def test_unreadable_or_absent_orientation_is_as_stored():
    assert exif_orientation(Image.new("RGB", (2, 2))) == 1
    image = Image.open(io.BytesIO(oriented_jpeg(marked(16, 16), 9)))  # not an EXIF orientation
    assert exif_orientation(image) == 1


def test_fast_decode_drafts_a_turned_jpeg_for_its_upright_target():
    # Stored 640 x 320, shown 320 x 640: the upright target is 80 x 160, a quarter of each side.
    data = oriented_jpeg(marked(320, 640), 6)
    transform = ImageTransform(160, 16, 16, fast_decode=True)
    drafted = decode_image(data, draft_size=transform.draft_size)
    assert drafted.size == (80, 160)  # drafted at 1/4 (not 1/2, as the stored sides would give)
    assert drafted.info[ORIGINAL_SIZE_KEY] == (320, 640)
    exact = ImageTransform(160, 16, 16)(decode_image(data))
    fast = transform(drafted)
    assert fast.shape == exact.shape == (3, 160, 80)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_fast_decode_drafts_each_orientation_for_its_upright_target_and_turns_it(orientation):
    """Orientations 5 and 7 (a transpose and a transverse) exchange the sides as 6 and 8 do:
    the draft scale comes from the upright sides, and the original size is turned with them."""
    data = oriented_jpeg(marked(320, 640), orientation)
    transform = ImageTransform(160, 16, 16, fast_decode=True)
    drafted = decode_image(data, draft_size=transform.draft_size)
    sideways = orientation >= 5
    assert drafted.size == ((80, 160) if sideways else (160, 80))  # 1/4 of each side either way
    assert drafted.info[ORIGINAL_SIZE_KEY] == ((320, 640) if sideways else (640, 320))
    pixels = np.asarray(drafted)
    row, col = SEEN_AT[orientation]
    assert pixels[row, col].min() > 200 and pixels[-1 - row, -1 - col].max() < 50


# -- CMYK and YCCK JPEGs ---------------------------------------------------------------------
@pytest.mark.parametrize("make", [cmyk_jpeg, ycck_jpeg])
def test_cmyk_and_ycck_jpegs_read_as_their_colour_in_both_modes(make):
    viewer, reference = both(make((0, 255, 255, 0)))  # red ink on paper
    np.testing.assert_array_equal(viewer, reference)  # no profile: Pillow's conversion either way
    assert (np.abs(viewer.astype(int) - (255, 0, 0)) <= 2).all()


def test_a_cmyk_jpeg_with_a_profile_shows_its_press_colour_by_default_and_pillows_in_compat():
    profile = cmyk_press_profile(red_ink=(200, 30, 40))
    red_ink, paper = (cmyk_jpeg(ink, icc_profile=profile) for ink in ((0, 255, 255, 0), (0, 0, 0, 0)))
    viewer, reference = both(red_ink)
    # The profile's red ink (8-bit Lab grid: a level or two of rounding); compat converts as
    # Pillow does without a profile, as the reference's pil_img2rgb does.
    assert (np.abs(viewer.astype(int) - (200, 30, 40)) <= 3).all(), viewer[0, 0]
    assert (np.abs(reference.astype(int) - (255, 0, 0)) <= 2).all()
    viewer, reference = both(paper)
    assert (viewer >= 253).all() and (reference >= 253).all()


# -- 16-bit PNG ------------------------------------------------------------------------------
def scaled(values: np.ndarray) -> np.ndarray:
    """16-bit values to 8 bits, rounded: v * 255 / 65535."""
    return (values.astype(np.int64) * 255 + 32767) // 65535


@settings(max_examples=40, deadline=None)
@given(values=hnp.arrays(np.uint16, st.tuples(st.integers(1, 5), st.integers(1, 6), st.just(3))))
def test_16_bit_rgb_png_is_scaled_from_all_16_bits_by_default(values):
    viewer, reference = both(png16(values))
    np.testing.assert_array_equal(viewer, scaled(values))
    np.testing.assert_array_equal(reference, values >> 8)  # Pillow keeps the high bytes


def test_16_bit_rgb_png_values_where_the_high_byte_is_a_level_off():
    values = np.array([[[129, 300, 65280], [0, 32896, 65535]]], np.uint16)
    viewer, reference = both(png16(values))
    assert viewer.tolist() == [[[1, 1, 254], [0, 128, 255]]]
    assert reference.tolist() == [[[0, 1, 255], [0, 128, 255]]]


def test_16_bit_rgba_png_is_scaled_then_composited_on_white_by_default():
    colour = np.array([[[129, 40000, 65407], [129, 40000, 65407]]], np.uint16)
    alpha = np.array([[[65535], [0]]], np.uint16)
    viewer, reference = both(png16(np.concatenate([colour, alpha], -1)))
    assert viewer.tolist() == [[scaled(colour[0, 0]).tolist(), [255, 255, 255]]]
    assert reference.tolist() == [[(colour[0, 0] >> 8).tolist(), [255, 255, 255]]]


def test_16_bit_rgb_png_transparent_colour_is_white_by_default():
    values = np.array([[[1000, 2000, 3000], [1000, 2000, 3001]]], np.uint16)
    viewer, _ = both(png16(values, transparency=(1000, 2000, 3000)))
    # Only the exact 16-bit colour is transparent: its neighbour one step off stays.
    assert viewer.tolist() == [[[255, 255, 255], scaled(values[0, 1]).tolist()]]


def test_16_bit_grey_png_is_scaled_by_default_and_clipped_as_the_reference_does():
    values = np.array([[0, 30000, 65535]], np.uint16)
    viewer, reference = both(encode(Image.fromarray(values)))
    assert viewer[0, :, 0].tolist() == [0, 117, 255]
    assert reference[0, :, 0].tolist() == [0, 255, 255]


# -- palette, LA and grey --------------------------------------------------------------------
def test_palette_transparency_is_white_in_both_modes():
    image = Image.new("P", (3, 1))
    image.putpalette([0, 0, 0, 200, 10, 10] + [0] * 762)
    image.putdata([0, 1, 0])
    viewer, reference = both(encode(image, transparency=0))
    np.testing.assert_array_equal(viewer, reference)
    assert viewer[0].tolist() == [[255, 255, 255], [200, 10, 10], [255, 255, 255]]


def test_la_alpha_is_composited_on_white_by_default_and_dropped_in_compat():
    grey = Image.new("L", (3, 1), 40)
    alpha = Image.frombytes("L", (3, 1), bytes([0, 128, 255]))
    viewer, reference = both(encode(Image.merge("LA", [grey, alpha])))
    assert viewer[0, :, 0].tolist() == [255, 147, 40]  # 40 * a + 255 * (1 - a)
    assert reference[0, :, 0].tolist() == [40, 40, 40]


def test_grey_becomes_equal_channels_in_both_modes():
    viewer, reference = both(encode(Image.new("L", (2, 2), 77)))
    np.testing.assert_array_equal(viewer, reference)
    assert viewer.reshape(-1).tolist() == [77] * 12


# -- animations ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["GIF", "WEBP"])
def test_an_animation_gives_its_first_frame_in_both_modes(fmt):
    viewer, reference = both(animated(fmt, [(200, 0, 0), (0, 200, 0), (0, 0, 200)]))
    np.testing.assert_array_equal(viewer, reference)
    assert (np.abs(viewer.astype(int) - (200, 0, 0)) <= 2).all()


# -- ICC profiles ----------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_an_embedded_profile_is_applied_by_default_and_ignored_in_compat(fmt):
    params = {"quality": 100, "subsampling": 0} if fmt == "JPEG" else {}
    data = encode(Image.new("RGB", (4, 4), (128, 64, 255)), fmt, icc_profile=linear_rgb_profile(), **params)
    viewer, reference = both(data)
    assert (np.abs(reference.astype(int) - (128, 64, 255)) <= 1).all()  # JPEG's rounding
    # Linear light 128/255, 64/255 encoded with sRGB's curve: 188, 137; 255 stays 255.
    assert (np.abs(viewer.astype(int) - (188, 137, 255)) <= 2).all()


def test_an_srgb_profile_and_a_broken_one_leave_the_pixels_as_stored():
    image = Image.new("RGB", (2, 2), (128, 128, 128))
    for profile in (linear_rgb_profile("sRGB IEC61966-2.1"), b"not a profile"):
        image.info["icc_profile"] = profile
        assert in_srgb(image) is image
        assert decode_image(encode(image, "PNG", icc_profile=profile)).getpixel((0, 0)) == (128, 128, 128)


def test_a_profile_is_applied_under_alpha_too():
    image = Image.new("RGBA", (2, 1), (128, 128, 128, 255))
    data = encode(image, "PNG", icc_profile=linear_rgb_profile())
    assert abs(decode_image(data).getpixel((0, 0))[0] - 188) <= 1


def test_a_translucent_rgba_photo_with_a_profile_is_put_in_srgb_before_it_meets_the_white():
    """The profile describes the stored colour, not the white it is shown on: applied first
    (linear 128 -> sRGB 188), then half over white: (188 + 255) / 2. The other order gives
    about 226; compat composites the stored 128 as the reference does, about 191."""
    image = Image.new("RGBA", (2, 1), (128, 128, 128, 128))
    image.putpixel((1, 0), (0, 0, 0, 0))
    viewer, reference = both(encode(image, "PNG", icc_profile=linear_rgb_profile()))
    assert abs(int(viewer[0, 0, 0]) - 221) <= 2, viewer[0, 0]
    assert abs(int(reference[0, 0, 0]) - 191) <= 1, reference[0, 0]
    assert viewer[0, 1].tolist() == reference[0, 1].tolist() == [255, 255, 255]  # transparent: white


# -- the families decode as their mode says --------------------------------------------------
@pytest.mark.parametrize(("compat", "shape"), [(None, (3, 64, 32)), ("bagel", (3, 32, 64))])
def test_a_t2i_family_turns_a_photo_upright_unless_in_compat_mode(tmp_path, tokenizer, compat, shape):
    row = {"image": oriented_jpeg(marked(64, 128), 6), "captions": '{"a": "a photo on its side"}'}
    write_t2i(tmp_path, [[[row]]])
    family = T2IIterableDataset(
        "t2i", ImageTransform(64, 32, 16), tokenizer, [str(tmp_path)], [1], num_workers=1, compat=compat
    )
    if compat:
        family.policy.start_stream(0)  # the reference's draws start with an iteration
    log = SkipLog("t2i")
    (_, sample), *_ = family.iter_pass(log)
    assert tuple(sample["image_tensor_list"][0].shape) == shape
