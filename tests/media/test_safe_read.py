"""Roots are a boundary and decoders an allowlist (issue 27, TRAVERSAL / HANG / PERF).

A row naming `../../`, an absolute path or a symlink out of its dataset's folder is a counted
`path_outside_dataset_root` skip unless the config sets `allow_outside_root: true`; a FIFO,
a device or an oversized file is refused before it is read; EPS bytes never reach Pillow's
EPS plugin (which runs Ghostscript).
"""

from __future__ import annotations

import io
import os

import pytest
from PIL import EpsImagePlugin, Image, ImageFile, PngImagePlugin

from bagel_data import ImageTransform
from bagel_data.errors import ImageDecodeError, ImageTooLargeError
from bagel_data.families.vlm import SftJSONLIterableDataset
from bagel_data.media import safe_read
from bagel_data.media.images import decode_image
from helpers.builders import png_bytes, write_vlm

TRANSFORM = ImageTransform(56, 28, 14)
TURNS = [{"from": "human", "value": "<image> describe"}, {"from": "gpt", "value": "a grey square"}]


def _vlm_skips(tmp_path, tokenizer, name: str, allow: bool = False):
    jsonl, image_dir = write_vlm(tmp_path / "set", [{"image": name, "conversations": TURNS}])
    family = SftJSONLIterableDataset(
        "vlm", TRANSFORM, tokenizer, None, [jsonl], [image_dir], [1], num_workers=1, allow_outside_root=allow
    )
    log = family.new_skip_log()
    return list(family.iter_pass(log)), log


@pytest.fixture
def outside(tmp_path):
    secret = tmp_path / "secret.png"
    secret.write_bytes(png_bytes(28, 28))
    return secret


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_a_vlm_row_cannot_read_outside_its_folder(tmp_path, tokenizer, outside, how):
    name = {"dotdot": "../../secret.png", "absolute": str(outside), "symlink": "link.png"}[how]
    if how == "symlink":
        (tmp_path / "set" / "images").mkdir(parents=True)
        os.symlink(outside, tmp_path / "set" / "images" / "link.png")
    samples, log = _vlm_skips(tmp_path, tokenizer, name)
    assert samples == [] and log.as_dict() == {"path_outside_dataset_root": 1}
    assert "allow_outside_root" in log.examples["path_outside_dataset_root"]
    samples, log = _vlm_skips(tmp_path, tokenizer, name, allow=True)  # the opt-in reads it
    assert len(samples) == 1 and log.as_dict() == {}


def test_a_fifo_named_as_an_image_is_refused_without_blocking(tmp_path, tokenizer):
    (tmp_path / "set" / "images").mkdir(parents=True)
    os.mkfifo(tmp_path / "set" / "images" / "pipe.png")
    samples, log = _vlm_skips(tmp_path, tokenizer, "pipe.png")
    assert samples == [] and log.as_dict() == {"image_file_unreadable": 1}
    assert "not a regular file" in log.examples["image_file_unreadable"]


def test_a_device_or_huge_file_is_refused_before_reading(tmp_path):
    with pytest.raises(safe_read.NotRegularFileError):
        safe_read.read_media("/dev/zero", allow_outside=True)
    huge = tmp_path / "huge.png"
    with open(huge, "wb") as handle:  # sparse: costs no disk
        handle.truncate(safe_read.MAX_MEDIA_BYTES + 1)
    with pytest.raises(safe_read.MediaTooLargeError):
        safe_read.read_media(str(huge), [str(tmp_path)])


def test_roots_compare_whole_folder_names(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data-other").mkdir()
    assert safe_read.is_under(str(tmp_path / "data" / "a.png"), [str(tmp_path / "data")])
    assert not safe_read.is_under(str(tmp_path / "data-other" / "a.png"), [str(tmp_path / "data")])
    assert not safe_read.is_under("s3://bucket/data/../other/x.png", ["s3://bucket/data"])


def test_eps_bytes_never_reach_the_eps_plugin(monkeypatch):
    opened = []
    monkeypatch.setattr(EpsImagePlugin.EpsImageFile, "_open", lambda self: opened.append(1))
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    with pytest.raises(ImageDecodeError, match="allowed format"):
        decode_image(eps)
    assert opened == []


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF"])
def test_every_documented_format_still_decodes(fmt):
    buffer = io.BytesIO()
    Image.new("RGB", (8, 6), (10, 20, 30)).save(buffer, format=fmt)
    assert decode_image(buffer.getvalue()).size == (8, 6)


def _interleaved_skips(tmp_path, tokenizer, path: str, allow: bool = False):
    from bagel_data.families.interleaved import InterleavedIterableDataset
    from helpers.interleaved import write_interleaved

    doc = [{"type": "image", "path": path, "conditioned": True}, {"type": "text", "text": "says", "supervised": True}]
    write_interleaved(tmp_path / "docs" / "part-0.parquet", [[doc]])
    family = InterleavedIterableDataset(
        "il", ImageTransform(64, 32, 16), tokenizer, None, [str(tmp_path / "docs")], [1], num_workers=1,
        segment_defaults={"first_image": ["conditioned"], "later_images": ["conditioned"]}, allow_outside_root=allow,
    )  # fmt: skip
    log = family.new_skip_log()
    return list(family.iter_pass(log)), log


def test_an_interleaved_path_cannot_climb_out_of_its_shard_folder(tmp_path, tokenizer, outside):
    samples, log = _interleaved_skips(tmp_path, tokenizer, "../secret.png")
    assert samples == [] and log.as_dict() == {"path_outside_dataset_root": 1}
    samples, log = _interleaved_skips(tmp_path, tokenizer, "../secret.png", allow=True)
    assert len(samples) == 1


def test_an_interleaved_path_to_dev_zero_is_refused_at_once(tmp_path, tokenizer):
    samples, log = _interleaved_skips(tmp_path, tokenizer, "/dev/zero", allow=True)
    assert samples == [] and log.as_dict() == {"image_file_unreadable": 1}


def test_a_file_of_exactly_the_limit_is_read_whole_and_one_byte_more_is_refused(tmp_path):
    exact = tmp_path / "exact.png"
    exact.write_bytes(b"x" * 64)
    assert safe_read.read_media(str(exact), [str(tmp_path)], max_bytes=64) == b"x" * 64
    exact.write_bytes(b"x" * 65)
    with pytest.raises(safe_read.MediaTooLargeError, match="65 bytes, over the 64-byte limit"):
        safe_read.read_media(str(exact), [str(tmp_path)], max_bytes=64)


def test_a_video_path_outside_its_roots_is_refused_unless_allowed(tmp_path):
    (tmp_path / "data").mkdir()
    outside = str(tmp_path / "elsewhere.mp4")
    with pytest.raises(safe_read.OutsideRootError, match="allow_outside_root"):
        safe_read.check_video_path(outside, [str(tmp_path / "data")])
    assert safe_read.check_video_path(outside, [str(tmp_path / "data")], allow_outside=True) == outside


def test_a_remote_media_file_is_read_checked_and_a_missing_one_is_not_found():
    import fsspec

    memory = fsspec.filesystem("memory")
    memory.pipe("/safe-read/a.png", b"\x89PNG-bytes")
    try:
        assert safe_read.read_media("memory://safe-read/a.png", ["memory://safe-read"]) == b"\x89PNG-bytes"
        with pytest.raises(FileNotFoundError):
            safe_read.read_media("memory://safe-read/missing.png", ["memory://safe-read"])
        with pytest.raises(safe_read.MediaTooLargeError, match="over the 4-byte limit"):
            safe_read.read_media("memory://safe-read/a.png", ["memory://safe-read"], max_bytes=4)
    finally:
        memory.rm("/safe-read", recursive=True)


def test_the_documented_256_mib_limit_is_the_default(tmp_path):
    huge = tmp_path / "huge.png"
    with open(huge, "wb") as handle:  # sparse: costs no disk
        handle.truncate((256 << 20) + 1)
    with pytest.raises(safe_read.MediaTooLargeError, match="over the 268435456-byte limit"):
        safe_read.read_media(str(huge), [str(tmp_path)])


# -- Pillow's process-wide bomb limit is never changed (issue 41) -----------------------------
def test_pillows_limit_is_not_changed_even_during_an_open(monkeypatch):
    seen = []
    real_open = PngImagePlugin.PngImageFile._open
    real_load = ImageFile.ImageFile.load

    def watching_open(self):
        seen.append(Image.MAX_IMAGE_PIXELS)
        return real_open(self)

    def watching_load(self):
        seen.append(Image.MAX_IMAGE_PIXELS)
        return real_load(self)

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "_open", watching_open)
    monkeypatch.setattr(ImageFile.ImageFile, "load", watching_load)
    limit = Image.MAX_IMAGE_PIXELS
    decode_image(png_bytes(6, 4))
    with pytest.raises(ImageTooLargeError):
        decode_image(png_bytes(6, 4), max_pixels=23)
    assert seen and set(seen) == {limit}  # what another thread's Image.open would have seen


def test_a_programs_own_lower_limit_neither_blocks_our_bound_nor_moves(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 50)  # a program's setting: Image.open refuses 20 x 20
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(png_bytes(20, 20)))
    assert decode_image(png_bytes(20, 20), max_pixels=400).size == (20, 20)
    assert Image.MAX_IMAGE_PIXELS == 50


def test_the_header_is_checked_against_our_bound_at_its_limit():
    stream = io.BytesIO(png_bytes(20, 20))
    assert safe_read.open_image(stream, max_pixels=400).size == (20, 20)
    with pytest.raises(ImageTooLargeError, match="20x20 is over the 399-pixel limit"):
        safe_read.open_image(io.BytesIO(png_bytes(20, 20)), max_pixels=399)


def test_open_image_takes_only_the_allowlisted_decoders():
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n"
    with pytest.raises(Image.UnidentifiedImageError):
        safe_read.open_image(io.BytesIO(eps), max_pixels=10**6)
    image = safe_read.open_image(io.BytesIO(png_bytes(3, 2)), max_pixels=10**6)
    assert image.format == "PNG"


def test_image_stream_reads_bytes_paths_and_unseekable_files(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(png_bytes(3, 2))
    with open(path, "rb") as handle:
        for source in (path.read_bytes(), str(path), handle):
            assert safe_read.open_image(safe_read.image_stream(source), 10**6).size == (3, 2)


def test_a_file_that_grew_past_the_limit_since_its_stat_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "a.png"
    path.write_bytes(b"x" * 101)
    real_stat = os.stat

    class Smaller:  # the stat was taken when it had 100 bytes
        def __init__(self, status):
            self.st_mode, self.st_size = status.st_mode, 100

    monkeypatch.setattr(safe_read.os, "stat", lambda p, *a, **k: Smaller(real_stat(p, *a, **k)))
    with pytest.raises(safe_read.MediaTooLargeError, match="over the 100-byte limit"):
        safe_read.read_media(str(path), max_bytes=100)


def test_a_remote_file_over_the_limit_is_refused_before_reading():
    import fsspec

    memory = fsspec.filesystem("memory")
    memory.pipe("/safe-read/a.png", b"x" * 101)
    try:
        with pytest.raises(safe_read.MediaTooLargeError, match="101 bytes"):
            safe_read.read_media("memory://safe-read/a.png", max_bytes=100)
        assert safe_read.read_media("memory://safe-read/a.png", max_bytes=101) == b"x" * 101
    finally:
        memory.rm("/safe-read/a.png")


def test_a_one_pixel_high_strip_over_the_pixel_bound_is_refused():
    with pytest.raises(ImageTooLargeError, match="50x1"):
        safe_read.open_image(io.BytesIO(png_bytes(50, 1)), max_pixels=49)


def test_widened_formats_are_named_in_any_case_and_listed_once():
    assert safe_read.check_image_formats("k", ["ppm", "PNG", "Ppm"]) == (*safe_read.ALLOWED_IMAGE_FORMATS, "PPM")


def test_a_frame_folder_is_a_video_path(tmp_path):
    assert safe_read.check_video_path(str(tmp_path), [str(tmp_path)]) == str(tmp_path)
