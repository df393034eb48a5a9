"""A family's held media (`families/media.py`): one decode, the skip reasons, token counts."""

from __future__ import annotations

import pytest

from bagel_data.compat import CompatPolicy
from bagel_data.errors import ImageDecodeError, ImageTooLargeError, SkipLog, SkipReason, VideoDecodeError
from bagel_data.families.media import MEDIA_ERRORS, FamilyMedia, decode_options, skip_reason
from bagel_data.media.images import ImageTransform
from bagel_data.media.safe_read import ALLOWED_IMAGE_FORMATS, MediaTooLargeError, NotRegularFileError, OutsideRootError
from helpers.builders import solid_jpeg


class _GoneFile(FileNotFoundError):
    """A subclass, as an fsspec filesystem raises: still a missing image."""


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ImageTooLargeError("big"), SkipReason.IMAGE_TOO_LARGE),
        (ImageDecodeError("bad"), SkipReason.IMAGE_DECODE),
        (VideoDecodeError("v.mp4", "bad"), SkipReason.VIDEO_DECODE),
        (OutsideRootError("out"), SkipReason.OUTSIDE_ROOT),
        (FileNotFoundError("gone"), SkipReason.IMAGE_MISSING),  # before OSError: never "unreadable"
        (_GoneFile("gone"), SkipReason.IMAGE_MISSING),
        (NotRegularFileError("a folder"), SkipReason.IMAGE_UNREADABLE),
        (MediaTooLargeError("huge"), SkipReason.IMAGE_UNREADABLE),
        (PermissionError("denied"), SkipReason.IMAGE_UNREADABLE),
    ],
)
def test_each_media_error_is_skipped_under_its_own_reason(error, reason):
    assert skip_reason(error) is reason
    # a row's skip, never the run's stop (a disk's own OSError is a read error, READ_ERRORS)
    assert isinstance(error, MEDIA_ERRORS) or type(error) is PermissionError
    log = SkipLog("g", strict=False, max_consecutive_failures=10)
    FamilyMedia.skip(log, "a.parquet, row 3", error)
    assert log.counts == {reason.value: 1}
    assert log.examples[reason.value] == f"a.parquet, row 3: {error}"
    detailed = SkipLog("g", strict=False, max_consecutive_failures=10)
    FamilyMedia.skip(detailed, "a.parquet, row 4", error, "what the family saw")
    assert detailed.examples[reason.value] == "a.parquet, row 4: what the family saw"


def test_an_error_that_is_not_about_media_is_no_skip():
    assert skip_reason(KeyError("column")) is None
    with pytest.raises(TypeError, match="not a media error"):
        FamilyMedia.skip(SkipLog("g", strict=False, max_consecutive_failures=10), "here", KeyError("column"))


def test_the_decode_options_come_from_every_transform_that_uses_the_image():
    exact, fast = ImageTransform(64, 32, 16), ImageTransform(64, 32, 16, fast_decode=True)
    default = {"draft_size": None, "as_reference": False, "formats": ALLOWED_IMAGE_FORMATS}
    assert decode_options([exact], CompatPolicy.of(None)) == default
    assert decode_options([fast], CompatPolicy.of(None))["draft_size"] is not None
    assert decode_options([exact], CompatPolicy.of("bagel"))["as_reference"] is True
    assert decode_options([exact], CompatPolicy.of(None), ("PPM",))["formats"] == ("PPM",)
    media = FamilyMedia([exact, None], CompatPolicy.of(None))  # a family without a ViT transform
    assert media.transforms == (exact,)


def test_a_group_s_image_formats_reach_every_decode(tmp_path):
    """`image_formats` widens the allowlist for the group's decodes: a PPM is refused by the
    default list and read once the group names it."""
    import io

    from PIL import Image

    from bagel_data.errors import ImageDecodeError

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buffer, "PPM")
    transform = ImageTransform(64, 32, 16)
    with pytest.raises(ImageDecodeError):
        FamilyMedia([transform], CompatPolicy.of(None)).decode(buffer.getvalue())
    widened = FamilyMedia([transform], CompatPolicy.of(None), (*ALLOWED_IMAGE_FORMATS, "PPM"))
    assert widened.decode(buffer.getvalue()).getpixel((0, 0)) == (200, 10, 10)
    assert widened.decode(buffer.getvalue(), transform).getpixel((0, 0)) == (200, 10, 10)  # for one transform


def test_a_drafted_image_counts_the_tokens_of_its_original_size():
    """A fast decode shrinks the pixels but keeps the size the resize is computed from: the
    token count must be the same as the exact decode's."""
    data = solid_jpeg(1024, 768)
    transform = ImageTransform(256, 128, 16, fast_decode=True)
    drafted = FamilyMedia([transform], CompatPolicy.of(None)).decode(data)
    exact = FamilyMedia([ImageTransform(256, 128, 16)], CompatPolicy.of(None)).decode(data)
    assert drafted.size != exact.size
    assert FamilyMedia.tokens(transform, drafted) == FamilyMedia.tokens(transform, exact) == 16 * 12


def test_a_decode_for_one_transform_drafts_for_that_transform_alone():
    """Decoded for the small fast-decode transform alone, an image is drafted smaller than
    for all the family's transforms (the larger one needs more pixels)."""
    from PIL import Image

    small, large = ImageTransform(256, 128, 16, fast_decode=True), ImageTransform(1024, 512, 16, fast_decode=True)
    media = FamilyMedia([small, large], CompatPolicy.of(None))
    data = solid_jpeg(2048, 1536)
    for_all, for_small = media.decode(data), media.decode(data, small)
    assert for_small.size[0] < for_all.size[0]
    assert FamilyMedia.tokens(small, for_small) == FamilyMedia.tokens(small, Image.new("RGB", (2048, 1536)))


def test_a_drafted_image_s_tokens_come_from_its_original_size():
    from PIL import Image

    transform = ImageTransform(256, 128, 16)
    drafted = Image.new("RGB", (100, 75))
    drafted.info["bagel_original_size"] = (1024, 768)
    assert FamilyMedia.tokens(transform, drafted) == FamilyMedia.tokens(transform, Image.new("RGB", (1024, 768)))
    assert FamilyMedia.tokens(transform, drafted) != FamilyMedia.tokens(transform, Image.new("RGB", (100, 75)))
