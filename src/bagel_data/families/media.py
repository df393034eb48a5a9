"""A family's media (`family.media`): one decode for the group's transforms, the skip reason
of each media error, and an image's token count.

Every decode option comes from the transforms that will use the image and the group
(`decode_options`): its draft size (`fast_decode`), the compat mode's reference decode and
the image formats the group allows (`image_formats`). A new option of the
decode is one `TRANSFORM_FIELDS` key (`schema/sections.py`), its use in `media/images.py`
and its line in `decode_options` here; no family repeats the decode call.
"""

from __future__ import annotations

from collections.abc import Sequence

from PIL import Image

from ..compat import CompatPolicy
from ..errors import ImageDecodeError, ImageTooLargeError, SkipLog, SkipReason, VideoDecodeError, VideoDecodeOverTime
from ..media.images import ImageTransform, decode_image, fast_draft_size, image_tokens
from ..media.safe_read import ALLOWED_IMAGE_FORMATS, MediaTooLargeError, NotRegularFileError, OutsideRootError

# What a decode raises for one image; what reading a row's media file may raise beside it.
DECODE_ERRORS = (ImageDecodeError, ImageTooLargeError)
READ_ERRORS = (OutsideRootError, NotRegularFileError, MediaTooLargeError, OSError)
# A row's media errors that are never the code's fault: one row's skip, not the run's stop.
MEDIA_ERRORS = (*DECODE_ERRORS, VideoDecodeError, OutsideRootError, FileNotFoundError, NotRegularFileError,
                MediaTooLargeError)  # fmt: skip

# The skip reason of each media error, most specific first (docs/bad_data.md).
_REASONS: tuple[tuple[type[BaseException], SkipReason], ...] = (
    (ImageTooLargeError, SkipReason.IMAGE_TOO_LARGE),
    (ImageDecodeError, SkipReason.IMAGE_DECODE),
    (VideoDecodeOverTime, SkipReason.VIDEO_DECODE_OVER_TIME),
    (VideoDecodeError, SkipReason.VIDEO_DECODE),
    (OutsideRootError, SkipReason.OUTSIDE_ROOT),
    (FileNotFoundError, SkipReason.IMAGE_MISSING),
    (NotRegularFileError, SkipReason.IMAGE_UNREADABLE),
    (MediaTooLargeError, SkipReason.IMAGE_UNREADABLE),
    (OSError, SkipReason.IMAGE_UNREADABLE),
)


def skip_reason(exc: BaseException) -> SkipReason | None:
    """The skip reason of a media error; None when `exc` is none of them."""
    return next((reason for kind, reason in _REASONS if isinstance(exc, kind)), None)


def decode_options(
    transforms: Sequence[ImageTransform], policy: CompatPolicy, formats: Sequence[str] = ALLOWED_IMAGE_FORMATS
) -> dict:
    """The keyword arguments of `decode_image` for an image these transforms will use: an
    exact decode unless one asks for `fast_decode` (then the largest size any needs), by the
    decoders the group allows (`image_formats`; compat mode's are the reference's)."""
    return {
        "draft_size": fast_draft_size(*transforms),
        "as_reference": policy.decodes_as_reference,
        "formats": tuple(formats),
    }


class FamilyMedia:
    """The media half of a family: its transforms (None ones left out), its mode and the
    image formats its group allows."""

    def __init__(
        self,
        transforms: Sequence[ImageTransform | None],
        policy: CompatPolicy,
        formats: Sequence[str] = ALLOWED_IMAGE_FORMATS,
    ):
        self.transforms = tuple(transform for transform in transforms if transform is not None)
        self.policy = policy
        self.formats = tuple(formats)
        self._options = decode_options(self.transforms, policy, self.formats)

    def decode(self, data, *transforms: ImageTransform) -> Image.Image:
        """`data` (encoded bytes) as an RGB image, decoded once for `transforms` (default:
        all the family's); raises `DECODE_ERRORS`."""
        options = self._options if not transforms else decode_options(transforms, self.policy, self.formats)
        return decode_image(data, **options)

    @staticmethod
    def skip(log: SkipLog, location: str, exc: BaseException, detail: str | None = None) -> None:
        """Count the row at `location` as skipped for the media error `exc`."""
        reason = skip_reason(exc)
        if reason is None:
            raise TypeError(f"not a media error: {type(exc).__name__}") from exc
        log.skip(reason, location, str(exc) if detail is None else detail)

    @staticmethod
    def tokens(transform: ImageTransform, image: Image.Image) -> int:
        """The tokens `image` counts for once `transform` resizes it (a drafted decode keeps
        the original's size, from which the resize is computed)."""
        width, height = transform.target_size(*image.info.get("bagel_original_size", image.size))
        return image_tokens(height, width, transform.stride)
