"""Property (hypothesis): any `parse_row` result is either refused by the sample-schema check
(a `row_sample_invalid` RowDropped, which the family counts) or packs into a batch
that passes `check_batch`, no longer than the sample's declared length. Nothing else: no
bare ValueError / IndexError from the packer, no pack over its budget."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bagel_data.errors import RowDropped, SkipReason
from bagel_data.families.interleaved_base import builder_from_data
from bagel_data.families.sample_checks import check_sample
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.invariants import check_batch
from bagel_data.packing.layout import get_flattened_position_ids_extrapolate
from bagel_data.packing.pack import PackBuilder
from bagel_data.sample import sample_length
from helpers.plans import TOKENS

CFG = PackingConfig(
    expected_num_tokens=4000, max_num_tokens=8000, max_num_tokens_per_sample=6000, prefer_buffer_before=100,
    text_cond_dropout_prob=0.0, vit_cond_dropout_prob=0.0, vae_cond_dropout_prob=0.0,
)  # fmt: skip
STRIDES = {"vit_image": CFG.vit_patch_size, "vae_image": CFG.vae_image_downsample}
VOCAB = 1000

# Mostly well-formed parts, with a hostile one now and then: both sides of the check get exercised.
FLAG = st.sampled_from([0, 1] * 8 + [True, 2, -1, None, "1"])
VALID_ITEM = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["text", "vit_image", "vae_image"]),
        "enable_cfg": st.sampled_from([0, 1]),
        "loss": st.sampled_from([0, 1]),
        "special_token_loss": st.just(0),
        "special_token_label": st.none(),
    }
)
ANY_ITEM = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["text"] * 4 + ["vit_image"] * 2 + ["vae_image"] * 2 + ["audio", None]),
        "enable_cfg": FLAG,
        "loss": FLAG,
        "special_token_loss": st.sampled_from([0] * 8 + [1, 5]),
        "special_token_label": st.one_of(st.none(), st.integers(-5, VOCAB + 5)),
    },
    optional={"frame_delta": st.one_of(st.integers(-3, 20), st.just(4_600_000_000_000_000_000), st.floats(0, 3))},
)
ITEM = st.one_of(VALID_ITEM, VALID_ITEM, VALID_ITEM, VALID_ITEM, ANY_ITEM)
IDS = st.one_of(
    *[st.lists(st.integers(0, VOCAB - 1), max_size=12)] * 6,
    st.lists(st.integers(-3, VOCAB + 3), max_size=12),
    st.lists(st.sampled_from([1.5, "a", True, None]), min_size=1, max_size=3),
    st.just("not a list"),
)


def _tensor(kind: str):
    stride = STRIDES.get(kind, 16)
    good = st.sampled_from([stride, 2 * stride, 3 * stride])
    side = st.one_of(*[good] * 12, st.sampled_from([0, stride + 1]))
    hostile = st.one_of(st.just("not a tensor"), st.builds(lambda n: np.zeros(n), st.integers(0, 4)))
    channels = st.sampled_from([3] * 19 + [1])
    return st.one_of(*[st.builds(lambda c, h, w: torch.zeros(c, h, w), channels, side, side)] * 12, hostile)


def _tokens(item, value, kind) -> int:
    if kind == "text":
        return len(value) if isinstance(value, list) else 0
    shape = getattr(value, "shape", ())
    return shape[1] * shape[2] // STRIDES.get(kind, 16) ** 2 if len(shape) == 3 else 0


@st.composite
def results(draw):
    plan = draw(st.lists(ITEM, min_size=draw(st.sampled_from([1] * 9 + [0])), max_size=5))
    texts = [draw(IDS) for item in plan if item["type"] == "text"]
    images = [draw(_tensor(item["type"])) for item in plan if item["type"] != "text"]
    exact = sum(map(len, (t for t in texts if isinstance(t, list))))
    exact += sum(_tokens(None, t, k["type"]) for t, k in zip(images, [i for i in plan if i["type"] != "text"]))
    if draw(st.sampled_from([False] * 6 + [True])):  # lists that disagree with the plan
        texts = texts + [draw(IDS)] if draw(st.booleans()) else texts[:-1]
    declared = draw(st.sampled_from([exact] * 6 + [exact + 5, exact - 1, None, "12"]))
    data = {"sequence_plan": plan, "text_ids_list": texts, "image_tensor_list": images, "num_tokens": declared}
    return (
        data
        if draw(st.sampled_from([True] * 20 + [False]))
        else draw(st.sampled_from([[], "x", {"sequence_plan": plan}]))
    )


@settings(max_examples=150, deadline=None)
@given(data=results())
def test_any_parse_row_result_is_refused_by_name_or_packs_validly(data):
    try:
        builder = check_sample(builder_from_data(data), STRIDES, VOCAB)
    except RowDropped as refused:
        assert str(refused) and refused.reason is SkipReason.SAMPLE_INVALID
        return
    sample = builder.build([0], 0, "fuzz")
    pack = PackBuilder(CFG, TOKENS, np.random.default_rng(0), get_flattened_position_ids_extrapolate)
    assert pack.add(sample)
    check_batch(pack.to_batch(), CFG, TOKENS)
    assert pack.curr <= sample_length(sample)  # num_tokens is never understated


def test_a_special_token_label_must_lie_below_the_vocabulary_size():
    def sample(label):
        item = {"type": "text", "enable_cfg": 0, "loss": 0, "special_token_loss": 1, "special_token_label": label}
        data = {"sequence_plan": [item], "text_ids_list": [[1, 2]], "image_tensor_list": [], "num_tokens": 2}
        return builder_from_data(data)

    assert check_sample(sample(VOCAB - 1), STRIDES, VOCAB).sequence_plan[0]["special_token_label"] == VOCAB - 1
    for label in (VOCAB, -1, None, 2.0):
        with pytest.raises(RowDropped, match="special_token_loss needs a valid special_token_label"):
            check_sample(sample(label), STRIDES, VOCAB)
