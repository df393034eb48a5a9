"""Opt-in fast JPEG decoding: decode at a reduced DCT scale, then the exact bicubic resize.

A JPEG whose resize target is at most half its size in both dimensions can be decoded at
1/2, 1/4 or 1/8 scale by the JPEG decoder itself (Pillow's `Image.draft`), which skips most
of the inverse-DCT and colour-conversion work and leaves a smaller image to resize. The
output has the same shape as the exact path (the target size is always computed from the
*original* size) and differs from it by a few 8-bit levels (the DCT scaling filters the
image differently from Pillow's antialiased bicubic); `benchmarks/NOTES.md` has the numbers.

How it is switched on, and why the exact mode cannot change:

* `ImageTransform(..., fast_decode=True)` (or `fast_decode: true` in a group's
  `image_transform_args`) makes `transform.draft_size(w, h)` return the resize target; an
  exact transform returns the full size, which never drafts.
* The caller passes that to `decode_image(source, draft_size=transform.draft_size)`; only
  then does `decode_image` hand the opened image to `decode_drafted` below, which tags the
  decoded image with its original size (`image.info[ORIGINAL_SIZE_KEY]`). Without
  `draft_size`, `decode_image` is byte-for-byte the exact path.
* `ImageTransform.resize` computes the target from the tag when present, else from
  `image.size`, so untagged (exactly decoded) images are
  unaffected.
"""

from __future__ import annotations

from collections.abc import Callable

from PIL import Image

ORIGINAL_SIZE_KEY = "bagel_original_size"
DraftSize = tuple[int, int] | Callable[[int, int], tuple[int, int]]


def draft_scale(width: int, height: int, target: tuple[int, int]) -> int:
    """The DCT scale (1, 2, 4 or 8) Pillow's `draft` picks: the largest keeping both sides >= target."""
    ratio = min(width // max(1, target[0]), height // max(1, target[1]))
    return next((s for s in (8, 4, 2) if ratio >= s), 1)


def joint_draft_size(*transforms) -> Callable[[int, int], tuple[int, int]]:
    """A `draft_size` for one decode shared by several transforms (the edit family's VAE + ViT).

    The componentwise largest need wins, so an exact transform among them disables drafting.
    """

    def size(width: int, height: int) -> tuple[int, int]:
        needs = [t.draft_size(width, height) for t in transforms]
        return max(n[0] for n in needs), max(n[1] for n in needs)

    return size


def decode_drafted(
    image: Image.Image, draft_size: DraftSize, to_rgb: Callable[[Image.Image], Image.Image]
) -> Image.Image:
    """Decode an opened (not yet loaded) image at the smallest DCT scale that covers `draft_size`.

    Called by `images.decode_image` only when its caller passed `draft_size`; errors surface
    there as the usual `ImageDecodeError`. Non-JPEG images and JPEGs under twice the target
    are decoded exactly as without it.
    """
    width, height = image.size
    if image.format != "JPEG":
        return to_rgb(image)
    target = draft_size(width, height) if callable(draft_size) else (draft_size[0], draft_size[1])
    scale = draft_scale(width, height, target)
    if scale > 1:
        image.draft(None, target)
    decoded = to_rgb(image)
    if scale > 1:
        decoded.info[ORIGINAL_SIZE_KEY] = (width, height)
    return decoded
