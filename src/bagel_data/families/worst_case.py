"""The longest sample a row can give, over every random choice the family may make.

A T2I row draws one caption and an edit row draws a stretch of its chain and one phrasing
per step, so one draw says little about the budget: the preflight (`bagel-data validate`)
checks these maxima instead, with the same checks, decodes, resize rule and tokenizer the
training run uses. Bad rows are counted in the log with the run's skip reasons.

Each family reports its rows' worst cases itself (`worst_case_rows`, families/base.py);
these are the measurements they share. Nothing here knows a family's type or its rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from ..compat.streams import RandomSource
from ..errors import RowDropped, SkipReason
from .media import DECODE_ERRORS, FamilyMedia

_MAX_ENUMERATED_TEXTS = 64  # merged instructions: beyond this many phrasings, bound instead


def edit_stretches(num_images: int) -> Iterator[tuple[int, int, bool]]:
    """Every (start, end, merged) that `choose_steps` can return for a chain."""
    for start in range(num_images - 1):
        for end in range(start + 1, min(start + 2, num_images - 1) + 1):
            yield start, end, False
            if end - start > 1:
                yield start, end - 1 if end == num_images - 1 else end, True


def _merged_text_tokens(encode, options: list[list[str]]) -> int:
    count = 1
    for step in options:
        count *= len(step)
    if count <= _MAX_ENUMERATED_TEXTS:
        texts = ("".join(p + ". " for p in combo).rstrip() for combo in itertools.product(*options))
        return max(len(encode(text)) for text in texts)
    return sum(max(len(encode(p + ". ")) for p in step) for step in options) + len(options)


def edit_worst_length(family, images: list[bytes], instructions: list[list[str]]) -> int:
    """Tokens (with begin/end tokens) of the longest sample this edit row can give.

    Decodes every image of the chain; raises `ImageDecodeError` / `ImageTooLargeError`."""
    vae, vit, encode = family.transform, family.vit_transform, family.tokenizer.encode
    decoded = [family.media.decode(data) for data in images]
    vae_tokens = [FamilyMedia.tokens(vae, image) for image in decoded]
    vit_tokens = [FamilyMedia.tokens(vit, image) for image in decoded]
    text_tokens = [max(len(encode(option)) for option in step) for step in instructions]
    worst = 0
    for start, end, merged in edit_stretches(len(images)):
        items = [vae_tokens[start], vit_tokens[start]]
        if merged:
            items += [_merged_text_tokens(encode, instructions[start:end]), vae_tokens[end]]
        else:
            for step in range(start + 1, end + 1):
                items += [text_tokens[step - 1], vae_tokens[step]]
                if step != end:
                    items += [vae_tokens[step], vit_tokens[step]]
        worst = max(worst, sum(items) + 2 * len(items))
    return worst


def t2i_worst_length(family, captions: list[str], image: object) -> int:
    """Tokens of the longest sample of a T2I row: its longest caption (`captions` parsed by
    the family) beside its image."""
    if not isinstance(image, bytes):
        raise RowDropped(SkipReason.SCHEMA, "image cell is not binary")
    decoded = family.media.decode(image)
    text = max((len(family.tokenizer.encode(caption)) for caption in captions or [" "]), default=0)
    return text + FamilyMedia.tokens(family.transform, decoded) + 4


def measured(rows, log) -> Iterator[tuple[str, int]]:
    """`(location, length)` for each `(location, measure)` of `rows` whose measure succeeds;
    a row that raises is counted in `log` under the reason the run would give."""
    for location, measure in rows:
        try:
            yield location, measure()
        except RowDropped as skip:  # a row the run would skip, found while measuring it
            log.skip(skip.reason, location, skip.detail)
        except DECODE_ERRORS as exc:
            FamilyMedia.skip(log, location, exc)


class _ForcedFrameCount:
    """A row's generator whose frame count (`frame_count`, a frame sampler's first draw) is
    fixed; every other draw is the row's own."""

    def __init__(self, count: int, rng: RandomSource):
        self.count, self.rng = count, rng

    def frame_count(self, low: int, high: int) -> int:
        return self.count

    def __getattr__(self, name):
        return getattr(self.rng, name)


def vlm_worst_length(family, sample: dict) -> int:
    """Tokens of the longest sample a VLM row can give: for a video row, over every frame
    count the frame sampler may draw (more frames also shrink each one under max_pixels)."""
    length = sample["num_tokens"] + 2 * len(sample["sequence_plan"])
    sampler = family.frame_sampler
    if sampler is None or sampler.max_num_frames <= 0:
        return length
    unit_id, pass_index = sample["row_key"][:2]
    line_id = int(family.units.unit(unit_id))
    if b'"video"' not in family.data_paths.read_line(line_id):
        return length
    for count in range(sampler.min_num_frames, sampler.max_num_frames + 1):
        rng = _ForcedFrameCount(count, family.units.sample_rng(unit_id, pass_index))
        try:
            builder = family.build_sample(line_id, rng)  # a Generator stand-in
        except Exception:  # the run would skip such a row; the drawn sample already says so
            continue
        length = max(length, builder.num_tokens + 2 * len(builder.sequence_plan))
    return length
