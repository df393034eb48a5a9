"""compat="bagel" opens images as the reference's `Image.open` does (every format but EPS,
truncated files decoded) per image, never through Pillow's process-wide flag; the default
mode keeps its allowlist and named skip, widened only by `image_formats`."""

from __future__ import annotations

import io
import itertools
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from bagel_data.errors import ConfigError, ImageDecodeError, ImageTooLargeError
from bagel_data.media.images import decode_image, pil_img2rgb
from bagel_data.media.safe_read import ALLOWED_IMAGE_FORMATS, check_image_formats

MEDIA = Path(__file__).resolve().parents[1] / "conformance" / "data" / "vlm" / "media"
OTHER_FORMATS = {"image.jp2": "JPEG2000", "image.ppm": "PPM", "image.tga": "TGA", "image.ico": "ICO",
                 "image.avif": "AVIF", "image.sgi": "SGI", "image.pcx": "PCX"}  # fmt: skip


def with_global_flag(data: bytes) -> np.ndarray:
    """What the reference's process decodes: Pillow's global flag on (restored after)."""
    ImageFile.LOAD_TRUNCATED_IMAGES = True
    try:
        return np.asarray(pil_img2rgb(Image.open(io.BytesIO(data))))
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = False


@pytest.mark.parametrize("name", ["cut.jpg", "cut.png"])
def test_a_truncated_image_decodes_in_compat_as_the_reference_and_is_skipped_by_default(name):
    data = (MEDIA / name).read_bytes()
    with pytest.raises(ImageDecodeError):
        decode_image(data)
    got = np.asarray(decode_image(data, as_reference=True))
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False  # never written
    np.testing.assert_array_equal(got, with_global_flag(data))
    with pytest.raises(ImageDecodeError):  # nothing leaks to the next decode
        decode_image(data)


def test_a_png_with_a_bad_checksum_before_its_pixels_opens_in_compat_as_the_reference():
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(buffer, "PNG")
    png = buffer.getvalue()
    bad_text_chunk = struct.pack(">I", 3) + b"tEXtk\x00v" + b"\x00\x00\x00\x00"  # its CRC is wrong
    data = png[:33] + bad_text_chunk + png[33:]  # after the signature and IHDR
    with pytest.raises(ImageDecodeError):
        decode_image(data)
    np.testing.assert_array_equal(np.asarray(decode_image(data, as_reference=True)), with_global_flag(data))
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


def test_the_tolerance_is_the_images_own_while_other_threads_decode():
    data = (MEDIA / "cut.jpg").read_bytes()
    failures, done = [], threading.Event()

    def plain_pillow():
        while not done.is_set():
            try:
                Image.open(io.BytesIO(data)).load()
                failures.append("a plain Image.open decoded a truncated file")
            except OSError:
                pass

    thread = threading.Thread(target=plain_pillow)
    thread.start()
    try:
        for _ in range(30):
            decode_image(data, as_reference=True)
    finally:
        done.set()
        thread.join()
    assert failures == []


@pytest.mark.parametrize(("name", "pillow_format"), sorted(OTHER_FORMATS.items()))
def test_compat_reads_the_references_formats_and_the_default_only_when_named(name, pillow_format):
    data = (MEDIA / name).read_bytes()
    expected = np.asarray(pil_img2rgb(Image.open(io.BytesIO(data))))
    np.testing.assert_array_equal(np.asarray(decode_image(data, as_reference=True)), expected)
    with pytest.raises(ImageDecodeError, match="allowed format"):
        decode_image(data)
    widened = check_image_formats("g.image_formats", [pillow_format.lower()])
    assert widened == (*ALLOWED_IMAGE_FORMATS, pillow_format)
    assert decode_image(data, formats=widened).size == Image.open(io.BytesIO(data)).size


def test_eps_is_never_read_not_even_in_compat():
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    with pytest.raises(ImageDecodeError):
        decode_image(eps, as_reference=True)
    with pytest.raises(ConfigError, match="external program"):
        check_image_formats("g.image_formats", ["EPS"])


def test_the_pixel_bound_applies_to_every_format():
    header = b"P6\n30000 30000\n255\n" + b"\0" * 64  # a PPM whose header claims 900 MP
    for kwargs in ({"as_reference": True}, {"formats": check_image_formats("k", ["PPM"])}):
        with pytest.raises(ImageTooLargeError):
            decode_image(header, max_pixels=1000, **kwargs)


@pytest.mark.parametrize("value", ["PPM", ["NOT_A_FORMAT"], [3]])
def test_a_bad_image_formats_value_names_the_key(value):
    with pytest.raises(ConfigError, match="g.image_formats"):
        check_image_formats("g.image_formats", value)


def test_a_groups_image_formats_widen_the_default_mode_and_truncated_files_stay_named_skips(tokenizer, monkeypatch):
    from bagel_data.families.unit_plan import UnitPlan
    from conformance.test_golden_stream import build_family
    from helpers.golden import load_case

    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)  # rows in storage order: which ones are read

    case, _, _ = load_case("compat_stream_vlm_image_formats")
    case["grouped_datasets"]["vlm_sft"]["image_formats"] = sorted(set(OTHER_FORMATS.values()))
    dataset = build_family(case, tokenizer)  # the default mode
    samples = list(itertools.islice(iter(dataset), 3))
    assert [s["data_indexes"]["data_indexes"] for s in samples] == [0, 2, 3]  # rows 1 and 4: the cut files
    assert [len(s["image_tensor_list"]) for s in samples] == [3, 2, 2]
    assert dataset.skip_log.counts == {"image_decode_failed": 1}  # the cut file between them
    del case["grouped_datasets"]["vlm_sft"]["image_formats"]
    with pytest.raises(ConfigError, match="vlm_sft.image_formats"):
        case["grouped_datasets"]["vlm_sft"]["image_formats"] = ["JPEG2000", "NOPE"]
        build_family(case, tokenizer)
