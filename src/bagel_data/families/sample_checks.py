"""A `parse_row` result checked against the sample schema before the packer sees it.

User code (and the code-free interleaved family) hands back plain lists and tensors; the
packer trusts them: an unknown item type or a non-int id would stop the run deep in a worker,
a negative or huge id would index past the embedding table, an understated `num_tokens`
would pack over budget and a frame delta of 4.6e18 would give absurd rotary positions. So
every result is checked here, once, and a bad one is a counted, named skip with its row's
location (`row_sample_invalid`), or `BadSampleError` in strict mode.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence
from typing import Any

from ..errors import RowDropped, SkipReason
from ..media.images import image_tokens
from ..sample import SampleBuilder

ITEM_TYPES = ("text", "vit_image", "vae_image")
# The largest frame index (and so frame delta) a video item may carry: ten hours at 240 fps.
# Rotary positions grow by the delta; past this they stop meaning time.
MAX_FRAME_INDEX = 10_000_000


def invalid_sample(detail: str) -> RowDropped:
    """A `parse_row` result that breaks the sample schema; `detail` says how."""
    return RowDropped(SkipReason.SAMPLE_INVALID, detail)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _all_ints(values: Sequence) -> bool:
    # Tokenizers give plain ints: the exact type test is the fast path of a per-token check.
    return all(type(value) is int for value in values) or all(_is_int(value) for value in values)


def _flag(item: Any, key: str, index: int, default: Any = None) -> None:
    value = item.get(key, default)
    if value not in (0, 1) or not isinstance(value, (bool, numbers.Integral)):
        raise invalid_sample(f"plan item {index}: {key} must be 0 or 1, got {str(value)[:40]}")


def check_frame_indexes(indexes: Sequence) -> list[int]:
    """Frame indexes as ints, non-negative, strictly increasing and under MAX_FRAME_INDEX."""
    values = list(indexes)
    if not all(_is_int(value) for value in values):
        raise invalid_sample(f"frame_indexes must be integers, got {str(values)[:80]}")
    values = [int(value) for value in values]
    if values and (values[0] < 0 or values[-1] > MAX_FRAME_INDEX):
        raise invalid_sample(f"frame_indexes must lie in [0, {MAX_FRAME_INDEX}], got {str(values)[:80]}")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise invalid_sample(f"frame_indexes must increase strictly, got {str(values)[:80]}")
    return values


def _image_tokens(tensor: Any, stride: int, kind: str, index: int) -> int:
    shape = getattr(tensor, "shape", None)
    if shape is None or len(shape) != 3:
        raise invalid_sample(
            f"plan item {index} ({kind}): the image must be a (C, H, W) tensor, got {type(tensor).__name__}"
        )
    channels, height, width = (int(side) for side in shape)
    if channels != 3:
        raise invalid_sample(f"plan item {index} ({kind}): {channels} channels, the packer takes 3")
    if height <= 0 or width <= 0 or height % stride or width % stride:
        raise invalid_sample(
            f"plan item {index} ({kind}): {height}x{width} is not a non-empty multiple of the {stride}-pixel patch grid"
        )
    return image_tokens(height, width, stride)


def check_sample(builder: SampleBuilder, strides: dict[str, int], vocab_size: int | None) -> SampleBuilder:
    """`builder` when it is a well-formed sample; a `row_sample_invalid` RowDropped naming the first problem.

    `strides`: the patch size of `vit_image` and `vae_image` items (the family's transforms);
    `vocab_size`: ids must lie in `[0, vocab_size)` (None: only non-negative).
    """
    plan, texts, images = builder.sequence_plan, builder.text_ids_list, builder.image_tensor_list
    if not plan:
        raise invalid_sample("the plan has no items (a zero-length sample)")
    counted, next_text, next_image = 0, 0, 0
    item: Any
    for index, item in enumerate(plan):
        if not isinstance(item, dict):
            raise invalid_sample(f"plan item {index} is a {type(item).__name__}, not a dict")
        kind = item.get("type")
        if kind not in ITEM_TYPES:
            raise invalid_sample(f"plan item {index} has type {str(kind)[:40]!r}; use one of {ITEM_TYPES}")
        for key in ("enable_cfg", "loss"):
            _flag(item, key, index)
        _flag(item, "special_token_loss", index, 0)
        label: Any = item.get("special_token_label")
        if item.get("special_token_loss", 0) and not (_is_int(label) and 0 <= int(label) < (vocab_size or 2**31)):
            raise invalid_sample(f"plan item {index}: special_token_loss needs a valid special_token_label")
        if "frame_delta" in item:
            delta = item["frame_delta"]
            if not _is_int(delta) or not 0 < delta <= MAX_FRAME_INDEX:
                raise invalid_sample(f"plan item {index}: frame_delta must be an int in [1, {MAX_FRAME_INDEX}]")
        if kind == "text":
            ids = texts[next_text]
            next_text += 1
            if not isinstance(ids, (list, tuple)) or not _all_ints(ids):
                raise invalid_sample(f"plan item {index}: text ids must be a list of ints, got {str(ids)[:80]}")
            if ids and (min(ids) < 0 or (vocab_size is not None and max(ids) >= vocab_size)):
                raise invalid_sample(
                    f"plan item {index}: text ids must lie in [0, {vocab_size}), got {min(ids)}..{max(ids)}"
                )
            counted += len(ids)
        else:
            counted += _image_tokens(images[next_image], strides[kind], kind, index)
            next_image += 1
    if not _is_int(builder.num_tokens) or builder.num_tokens < counted:
        raise invalid_sample(f"num_tokens={str(builder.num_tokens)[:40]} understates the {counted} tokens of the items")
    return builder
