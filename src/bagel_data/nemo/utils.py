"""Mirrors `nemo_automodel.components.datasets.multimodal.utils`: layout helpers, the image
and tokenizer helpers the reference keeps there, and `split_integer_exp_decay`."""

from __future__ import annotations

import itertools
import random

from ..media.images import pil_img2rgb
from ..packing.layout import (
    get_flattened_position_ids_extrapolate,
    get_flattened_position_ids_interpolate,
    len2weight,
    patchify,
    prepare_attention_mask_per_sample,
)
from ..tokenizer import add_special_tokens


def split_integer_exp_decay(
    S: int, ng_sample_decay: float = 1.0, *, rng: random.Random | None = None
) -> tuple[list[int], list[int]]:
    """Split `S` into a random number N of positive parts at random cut points.

    N is uniform in [1, S] when `ng_sample_decay` is 1, else P(N = k) is proportional to
    `ng_sample_decay ** (k - 1)` (below 1: few parts are likelier). Returns `(parts,
    bounds)`: the N part sizes, summing to S, and their N + 1 cumulative bounds, 0 to S.

    The draws come from `rng` (a `random.Random`; a fresh one when None), never from the
    global `random` the reference reads; pass the `random` module itself to draw as the
    reference does.
    """
    if isinstance(S, bool) or not isinstance(S, int) or S < 1:
        raise ValueError(f"S must be a positive int, got {S!r}")
    draw = random.Random() if rng is None else rng
    if ng_sample_decay == 1.0:
        count = draw.randint(1, S)
    else:
        # The reference's normalized weights, so that a `random` it seeds draws the same N.
        base = (1 - ng_sample_decay) / (1 - ng_sample_decay**S)
        weights = [base * ng_sample_decay**k for k in range(S)]
        count = draw.choices(list(range(1, S + 1)), weights, k=1)[0]
    bounds = [0, *sorted(draw.sample(range(1, S), count - 1)), S]
    return [high - low for low, high in itertools.pairwise(bounds)], bounds


__all__ = [
    "add_special_tokens",
    "get_flattened_position_ids_extrapolate",
    "get_flattened_position_ids_interpolate",
    "len2weight",
    "patchify",
    "pil_img2rgb",
    "prepare_attention_mask_per_sample",
    "split_integer_exp_decay",
]
