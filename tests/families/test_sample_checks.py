"""`check_sample` and `check_frame_indexes` at their exact limits: a value equal to a maximum
passes and one past it fails; a repeat and a zero delta fail; ids stop at the vocabulary
size; an image side must sit on its own item kind's patch grid."""

from __future__ import annotations

import pytest
import torch

from bagel_data.errors import RowDropped
from bagel_data.families.sample_checks import MAX_FRAME_INDEX, check_frame_indexes, check_sample
from bagel_data.sample import SampleBuilder

STRIDES = {"vit_image": 14, "vae_image": 16}  # ViT and VAE strides that differ
VOCAB = 1000


def text_sample(ids, **item):
    builder = SampleBuilder()
    builder.add_text(list(ids), enable_cfg=False, loss=True)
    builder.sequence_plan[0].update(item)
    return builder


def image_sample(kind, height, width, num_tokens=None):
    builder = SampleBuilder()
    builder.sequence_plan.append({"type": kind, "enable_cfg": 0, "loss": 0})
    builder.image_tensor_list.append(torch.zeros(3, height, width))
    builder.add_text([1], enable_cfg=False, loss=True)
    stride = STRIDES[kind]
    builder.num_tokens = (height * width // stride**2 + 1) if num_tokens is None else num_tokens
    return builder


def test_frame_indexes_up_to_the_maximum_pass_and_one_past_fails():
    assert check_frame_indexes([0, 1, MAX_FRAME_INDEX]) == [0, 1, MAX_FRAME_INDEX]
    with pytest.raises(RowDropped, match="must lie in"):
        check_frame_indexes([0, MAX_FRAME_INDEX + 1])
    with pytest.raises(RowDropped, match="must lie in"):
        check_frame_indexes([-1, 3])


def test_a_repeated_frame_index_fails():
    assert check_frame_indexes([2, 3]) == [2, 3]
    with pytest.raises(RowDropped, match="increase strictly"):
        check_frame_indexes([2, 3, 3])


@pytest.mark.parametrize(
    ("delta", "ok"), [(0, False), (1, True), (MAX_FRAME_INDEX, True), (MAX_FRAME_INDEX + 1, False)]
)
def test_frame_delta_limits(delta, ok):
    sample = text_sample([5], frame_delta=delta)
    if ok:
        assert check_sample(sample, STRIDES, VOCAB) is sample
    else:
        with pytest.raises(RowDropped, match="frame_delta"):
            check_sample(sample, STRIDES, VOCAB)


@pytest.mark.parametrize(("ids", "ok"), [([0, VOCAB - 1], True), ([VOCAB], False), ([-1], False)])
def test_text_ids_stop_at_the_vocabulary_size(ids, ok):
    sample = text_sample(ids)
    if ok:
        check_sample(sample, STRIDES, VOCAB)
    else:
        with pytest.raises(RowDropped, match=rf"\[0, {VOCAB}\)"):
            check_sample(sample, STRIDES, VOCAB)


@pytest.mark.parametrize(("label", "ok"), [(VOCAB - 1, True), (VOCAB, False), (0, True)])
def test_a_special_token_label_stops_at_the_vocabulary_size(label, ok):
    sample = text_sample([3], special_token_loss=1, special_token_label=label)
    if ok:
        check_sample(sample, STRIDES, VOCAB)
    else:
        with pytest.raises(RowDropped, match="special_token_label"):
            check_sample(sample, STRIDES, VOCAB)


@pytest.mark.parametrize(
    ("kind", "height", "width", "ok"),
    [
        ("vit_image", 28, 42, True),
        ("vit_image", 28, 43, False),  # a width one pixel off the grid
        ("vit_image", 32, 32, False),  # the VAE's grid, not the ViT's
        ("vae_image", 32, 48, True),
        ("vae_image", 32, 42, False),  # the ViT's grid, not the VAE's
        ("vae_image", 0, 16, False),
        ("vit_image", 14, 0, False),  # an empty width is on every grid, and still refused
    ],
)
def test_an_image_side_must_sit_on_its_own_kinds_patch_grid(kind, height, width, ok):
    sample = image_sample(kind, height, width, num_tokens=10_000)
    if ok:
        check_sample(sample, STRIDES, VOCAB)
    else:
        with pytest.raises(RowDropped, match="patch grid"):
            check_sample(sample, STRIDES, VOCAB)


@pytest.mark.parametrize("kind", ["vit_image", "vae_image"])
def test_num_tokens_equal_to_the_items_passes_and_one_less_fails(kind):
    side = STRIDES[kind] * 3
    counted = 9 + 1  # 3 x 3 patches and one text id
    check_sample(image_sample(kind, side, side, num_tokens=counted), STRIDES, VOCAB)
    with pytest.raises(RowDropped, match=f"understates the {counted} tokens"):
        check_sample(image_sample(kind, side, side, num_tokens=counted - 1), STRIDES, VOCAB)


def test_numpy_integer_ids_are_ints_and_bools_or_floats_are_not():
    import numpy as np

    check_sample(text_sample([np.int64(5), 7, np.int32(VOCAB - 1)]), STRIDES, VOCAB)
    for bad in ([True, 2], [2.0, 3]):
        with pytest.raises(RowDropped, match="list of ints"):
            check_sample(text_sample(bad), STRIDES, VOCAB)


def test_each_image_is_checked_on_its_own_items_grid_in_plan_order():
    builder = SampleBuilder()
    for kind, side in (("vit_image", 28), ("vae_image", 32), ("vit_image", 42)):
        builder.sequence_plan.append({"type": kind, "enable_cfg": 0, "loss": 0})
        builder.image_tensor_list.append(torch.zeros(3, side, side))
    builder.add_text([1], enable_cfg=False, loss=True)
    builder.num_tokens = 4 + 4 + 9 + 1
    assert check_sample(builder, STRIDES, VOCAB) is builder
