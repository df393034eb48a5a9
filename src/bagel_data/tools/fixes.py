"""What to do about each skip reason: the fix every problem line of `validate` names."""

from __future__ import annotations

from ..errors import SkipReason

FIXES = {
    SkipReason.IMAGE_DECODE: "re-encode or remove the image (`bagel-data prepare` drops undecodable images)",
    SkipReason.IMAGE_TOO_LARGE: "downscale the image (e.g. `bagel-data prepare t2i --max-side 2048`)",
    SkipReason.IMAGE_MISSING: "check the image path and the dataset's data_dir (the image root) in dataset_info",
    SkipReason.VIDEO_DECODE: "re-encode or remove the video",
    SkipReason.VIDEO_DECODE_OVER_TIME: "re-encode the video (smaller frames, a common codec) or remove it",
    SkipReason.JSON_INVALID: "fix the JSONL line (one JSON object per line); `bagel-data prepare vlm` writes valid ones",
    SkipReason.SCHEMA: "give the row the columns/keys of its format (docs/formats/); `bagel-data prepare` writes them",
    SkipReason.CAPTION_INVALID: "store captions as a JSON object {name: caption} (docs/formats/t2i.md)",
    SkipReason.PLACEHOLDER_MISMATCH: "use one <image> placeholder per image (`bagel-data prepare vlm` repairs lone ones)",
    SkipReason.VIDEO_TAG_MISSING: "put a <video> placeholder in the first human turn",
    SkipReason.NO_LOSS: "give the conversation at least one assistant (gpt) turn",
    SkipReason.EDIT_LISTS_DISAGREE: "give an edit chain of N images exactly N-1 instruction lists",
    SkipReason.EDIT_TOO_FEW_IMAGES: "an edit chain needs at least 2 images; drop the row",
    SkipReason.UNIT_UNREADABLE: "replace the damaged file (re-run `bagel-data prepare`) or drop it from data_dir",
    SkipReason.OVER_SAMPLE_BUDGET: "raise packing.max_num_tokens_per_sample (and max_num_tokens), "
    "or lower the group's max_image_size / max_pixels",
    SkipReason.NO_CAPTION: "give the image a .txt, or a .json with a caption key (docs/formats/t2i.md)",
    SkipReason.CAPTION_WITHOUT_IMAGE: "add the image of this key, or remove its caption files",
    SkipReason.MEMBER_TWICE: "keep one member per part (image, .txt, .json) of a key in the tar",
    SkipReason.NO_ROOM_BESIDE_MANDATORY: "raise packing.max_num_tokens, or lower max_num_tokens_per_sample",
}


def fix_for(reason: str | SkipReason) -> str:
    try:
        return FIXES[SkipReason(reason)]
    except (ValueError, KeyError):
        return "see docs/formats/ for the expected row format"
