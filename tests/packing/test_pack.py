"""The packer (SPEC section 7): layout helpers, one pack laid out by hand, dropout and
timestep statistics, the mixing loop of `PackedDataset`, and `check_batch` itself.

Every batch built here goes through `check_batch`. Statistical tests use fixed seeds and
5-sigma bounds, so they are deterministic and far from their limits.
"""

from __future__ import annotations

import copy
import itertools
import math
import random

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bagel_data.errors import SkipReason
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.invariants import InvariantError, check_batch
from bagel_data.packing.layout import (
    attention_allowed,
    get_flattened_position_ids_extrapolate,
    get_flattened_position_ids_interpolate,
    len2weight,
    patchify,
    prepare_attention_mask_per_sample,
)
from bagel_data.packing.pack import PackBuilder
from bagel_data.packing.packed_dataset import PackedDataset
from bagel_data.sample import sample_length
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.plans import TOKENS, TOKENS_DICT, make_sample, text_item, text_sample, vae_item, video_items, vit_item

B, E, SOI, EOI = TOKENS.bos_token_id, TOKENS.eos_token_id, TOKENS.start_of_image, TOKENS.end_of_image
NEG = float("-inf")

# Small patches so that images are tiny; no dropout unless a test asks for it.
CFG = PackingConfig(
    expected_num_tokens=200,
    max_num_tokens=256,
    max_num_tokens_per_sample=128,
    prefer_buffer_before=64,
    max_buffer_size=4,
    text_cond_dropout_prob=0.0,
    vit_cond_dropout_prob=0.0,
    vae_cond_dropout_prob=0.0,
    vae_image_downsample=2,
    max_latent_size=8,
    vit_patch_size=2,
    max_num_patch_per_side=8,
)
FLEX = PackingConfig(**{**CFG.__dict__, "use_flex": True})


def config(**changes) -> PackingConfig:
    return PackingConfig(**{**CFG.__dict__, **changes})


def pack(samples, cfg=CFG, rng=None, position_ids=get_flattened_position_ids_extrapolate) -> dict:
    """Pack `samples` into one batch (checked) with a seeded generator."""
    builder = PackBuilder(cfg, TOKENS, np.random.default_rng(0) if rng is None else rng, position_ids)
    for sample in samples:
        builder.add(copy.deepcopy(sample))
    batch = builder.to_batch()
    check_batch(batch, cfg, TOKENS)
    return batch


def ints(tensor) -> list:
    return tensor.tolist()


# ----------------------------------------------------------------------------------------
# Attention masks
# ----------------------------------------------------------------------------------------
def brute_force_allowed(split_lens, attn_modes) -> np.ndarray:
    """SPEC rule, one query/key pair at a time."""
    split_of = [i for i, n in enumerate(split_lens) for _ in range(n)]
    total = len(split_of)
    allowed = np.zeros((total, total), dtype=bool)
    for q in range(total):
        for k in range(total):
            sq, sk = split_of[q], split_of[k]
            if attn_modes[sk] == "noise" and sk != sq:
                ok = False  # nothing outside a noise split sees into it
            elif sk < sq:
                ok = True  # earlier splits
            elif sk == sq:
                ok = k <= q if attn_modes[sq] == "causal" else True
            else:
                ok = False  # later splits
            allowed[q, k] = ok
    return allowed


SPLITS = st.lists(st.tuples(st.integers(1, 6), st.sampled_from(["causal", "full", "noise"])), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(SPLITS)
@example([(3, "noise"), (2, "causal"), (2, "noise"), (1, "full")])
def test_attention_mask_matches_brute_force(splits):
    lens, modes = [n for n, _ in splits], [m for _, m in splits]
    expected = brute_force_allowed(lens, modes)
    np.testing.assert_array_equal(attention_allowed(lens, modes), expected)
    mask = prepare_attention_mask_per_sample(lens, modes)
    assert mask.dtype == torch.float32 and tuple(mask.shape) == expected.shape
    np.testing.assert_array_equal(mask.numpy(), np.where(expected, 0.0, NEG).astype(np.float32))


def test_attention_mode_is_validated():
    with pytest.raises(ValueError):
        attention_allowed([2], ["bidirectional"])


# ----------------------------------------------------------------------------------------
# Position ids
# ----------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 5), st.integers(1, 40))
def test_extrapolate_is_row_times_m_plus_col(rows, cols, p, m):
    ids = get_flattened_position_ids_extrapolate(rows * p + p - 1, cols * p, p, m)  # a ragged edge is floored
    expected = [r * m + c for r in range(rows) for c in range(cols)]
    assert ids.dtype == torch.int64 and ints(ids) == expected


def _arange_f32(start: float, end: float, step: float, lanes: int) -> np.ndarray:
    """`torch.arange(start, end, step)` (float32, CPU) rebuilt in numpy.

    The length is `ceil((end - start) / step)` in double. The CPU kernel fills pairs of
    `lanes`-wide vectors from a float32 base `start + step * i` with lanes `base + k * step`
    (double, then rounded), and the tail element by element as `start + step * i` (double,
    then rounded). Tie cases (a coordinate equal to a boundary) depend on these roundings.
    """
    count = math.ceil((end - start) / step)
    out = np.empty(count, dtype=np.float32)
    vectorised = count // (2 * lanes) * (2 * lanes)
    for chunk in range(0, vectorised, lanes):
        base = np.float64(np.float32(start + step * chunk))
        out[chunk : chunk + lanes] = (base + np.arange(lanes) * step).astype(np.float32)
    for i in range(vectorised, count):
        out[i] = np.float32(start + step * i)
    return out


def _ranges(n: int):
    return [(0.0, 1 - 1e-6, 1 / n), (1 / n, 1.0, 1 / n)]


@pytest.fixture(scope="module")
def arange_lanes() -> int:
    """The vector width that reproduces this machine's `torch.arange` bit for bit."""
    for lanes in (8, 16, 4):
        if all(
            np.array_equal(torch.arange(*r).numpy(), _arange_f32(*r, lanes)) for n in range(1, 200) for r in _ranges(n)
        ):
            return lanes
    pytest.skip("this platform's torch.arange rounding is not one the numpy model knows")


def expected_interpolate(h, w, p, m, lanes) -> list[int]:
    boundaries = _arange_f32(1 / m, 1.0, 1 / m, lanes)
    rows = np.searchsorted(boundaries, _arange_f32(0, 1 - 1e-6, 1 / (h // p), lanes), side="right")
    cols = np.searchsorted(boundaries, _arange_f32(0, 1 - 1e-6, 1 / (w // p), lanes), side="right")
    return (rows[:, None] * m + cols[None, :]).flatten().tolist()


@pytest.mark.parametrize(
    "rows, cols, m",
    # tie-heavy cases: coordinates i/n that equal boundaries k/m
    [(25, 5, 5), (50, 55, 5), (69, 75, 3), (82, 94, 2), (36, 24, 6), (70, 70, 70), (1, 1, 1), (140, 7, 70)],
)
def test_interpolate_ties(rows, cols, m, arange_lanes):
    p = 14
    ids = get_flattened_position_ids_interpolate(rows * p, cols * p, p, m)
    assert ids.dtype == torch.int64
    assert ints(ids) == expected_interpolate(rows * p, cols * p, p, m, arange_lanes)
    assert max(ints(ids)) < m * m


def test_interpolate_many_sizes(arange_lanes):
    rng = random.Random(5)
    for _ in range(400):
        rows, cols, p, m = rng.randint(1, 100), rng.randint(1, 100), rng.choice([1, 2, 14, 16]), rng.randint(1, 80)
        h, w = rows * p + rng.randrange(p), cols * p + rng.randrange(p)
        ids = get_flattened_position_ids_interpolate(h, w, p, m)
        assert ints(ids) == expected_interpolate(h, w, p, m, arange_lanes), (h, w, p, m)
        assert min(ints(ids)) >= 0 and max(ints(ids)) < m * m


# ----------------------------------------------------------------------------------------
# patchify, len2weight
# ----------------------------------------------------------------------------------------
def unpatchify(patches: torch.Tensor, c: int, h: int, w: int, p: int) -> torch.Tensor:
    return patches.reshape(h // p, w // p, p, p, c).permute(4, 0, 2, 1, 3).reshape(c, h, w)


@pytest.mark.parametrize("c, h, w, p", [(3, 4, 6, 2), (1, 3, 3, 3), (2, 6, 4, 1), (3, 28, 14, 14)])
def test_patchify_order_and_inverse(c, h, w, p):
    image = torch.arange(c * h * w, dtype=torch.float32).reshape(c, h, w)
    patches = patchify(image, p)
    assert tuple(patches.shape) == (h // p * (w // p), p * p * c)
    for y in range(h):
        for x in range(w):
            for ch in range(c):
                patch = (y // p) * (w // p) + x // p
                offset = ((y % p) * p + x % p) * c + ch  # row in patch, column in patch, channel
                assert patches[patch, offset] == image[ch, y, x]
    assert torch.equal(unpatchify(patches, c, h, w, p), image)


def test_patchify_rejects_ragged_images():
    with pytest.raises(ValueError):
        patchify(torch.zeros(3, 5, 4), 2)


def test_len2weight():
    assert len2weight(0) == 0
    assert len2weight(1) == 1.0
    assert len2weight(4) == 0.5
    assert len2weight(9) == pytest.approx(1 / 3)
    assert len2weight(2) == pytest.approx(1 / math.sqrt(2))
    assert len2weight(8, "token") == 1 and len2weight(8, "sample") == 1 / 8
    with pytest.raises(ValueError):
        len2weight(3, "mean")


# ----------------------------------------------------------------------------------------
# One pack, by hand
# ----------------------------------------------------------------------------------------
def sample_a(gen_seed=1, index=0):
    items = [text_item([11, 12, 13], loss=True), vit_item(2, 3), vae_item(2, 2, loss=True), vae_item(1, 3, loss=False)]
    return make_sample(items, CFG, torch.Generator().manual_seed(gen_seed), index=index, dataset_name="a")


def sample_b(gen_seed=2, index=7):
    items = [text_item([31]), vae_item(1, 1, loss=True)]
    return make_sample(items, CFG, torch.Generator().manual_seed(gen_seed), index=index, dataset_name="b")


A_TEXT_IDS = [B, 11, 12, 13, E, SOI, EOI, SOI, EOI, SOI, EOI]
A_TEXT_INDEXES = [0, 1, 2, 3, 4, 5, 12, 13, 18, 19, 23]
A_POSITIONS = [0, 1, 2, 3, 4] + [5] * 8 + [6] * 6 + [6] * 5
A_SPLITS, A_MODES = [5, 8, 6, 5], ["causal", "full", "noise", "full"]


def test_sample_dicts_follow_the_schema():
    a = sample_a()
    assert a["num_tokens"] == 3 + 6 + 4 + 3 and sample_length(a) == 24
    assert [tuple(t.shape) for t in a["image_tensor_list"]] == [(3, 4, 6), (3, 4, 4), (3, 2, 6)]
    assert a["text_ids_list"] == [[11, 12, 13]]
    assert [item["type"] for item in a["sequence_plan"]] == ["text", "vit_image", "vae_image", "vae_image"]
    assert a["data_indexes"] == {"data_indexes": 0, "worker_id": 0, "dataset_name": "a"}


def check_sample_a(batch, a, t1):
    _, vit, vae1, vae2 = [None, *a["image_tensor_list"]]
    assert ints(batch["packed_vit_token_indexes"]) == list(range(6, 12))
    assert torch.equal(batch["packed_vit_tokens"], patchify(vit, 2))
    assert ints(batch["packed_vit_position_ids"]) == [0, 1, 2, 8, 9, 10]
    assert ints(batch["vit_token_seqlens"]) == [6]
    assert ints(batch["packed_vae_token_indexes"])[:7] == [14, 15, 16, 17, 20, 21, 22]
    assert batch["patchified_vae_latent_shapes"][:2] == [(2, 2), (1, 3)]
    assert ints(batch["packed_latent_position_ids"])[:7] == [0, 1, 8, 9, 0, 1, 2]
    assert ints(batch["packed_timesteps"])[:7] == [t1] * 4 + [NEG] * 3
    padded = batch["padded_images"]
    assert torch.equal(padded[0, :, :4, :4], vae1) and not padded[0, :, :, 4:].any()
    assert torch.equal(padded[1, :, :2, :6], vae2) and not padded[1, :, 2:, :].any()
    assert ints(batch["ce_loss_indexes"])[:4] == [0, 1, 2, 3]
    assert ints(batch["packed_label_ids"])[:4] == [11, 12, 13, E]
    assert ints(batch["ce_loss_weights"])[:4] == [0.5] * 4  # len2weight(3 + 1)


def test_hand_built_pack_one_sample():
    a = sample_a()
    batch = pack([a], rng=np.random.default_rng(3))
    t1 = float(np.float32(np.random.default_rng(3).standard_normal()))  # the only draw: no cfg items
    assert batch["sequence_length"] == 24 and batch["sample_lens"] == [24]
    assert ints(batch["packed_text_ids"]) == A_TEXT_IDS
    assert ints(batch["packed_text_indexes"]) == A_TEXT_INDEXES
    assert ints(batch["packed_position_ids"]) == A_POSITIONS
    assert ints(batch["mse_loss_indexes"]) == [14, 15, 16, 17]
    assert tuple(batch["padded_images"].shape) == (2, 3, 4, 6)
    check_sample_a(batch, a, t1)
    (mask,) = batch["nested_attention_masks"]
    expected = np.where(brute_force_allowed(A_SPLITS, A_MODES), 0.0, NEG)
    np.testing.assert_array_equal(mask.numpy(), expected)
    assert batch["batch_data_indexes"] == [a["data_indexes"]]
    assert "split_lens" not in batch and "attn_modes" not in batch


@pytest.mark.parametrize("cfg", [CFG, FLEX], ids=["dense", "flex"])
def test_hand_built_pack_two_samples(cfg):
    a, b = sample_a(), sample_b()
    batch = pack([a, b], cfg, rng=np.random.default_rng(3))
    t1, t2 = np.random.default_rng(3).standard_normal(2).astype(np.float32).tolist()
    assert batch["sequence_length"] == 30
    assert ints(batch["packed_text_ids"]) == A_TEXT_IDS + [B, 31, E, SOI, EOI]
    assert ints(batch["packed_text_indexes"]) == A_TEXT_INDEXES + [24, 25, 26, 27, 29]
    assert ints(batch["packed_position_ids"]) == A_POSITIONS + [0, 1, 2, 3, 3, 3]
    assert ints(batch["packed_vae_token_indexes"]) == [14, 15, 16, 17, 20, 21, 22, 28]
    assert ints(batch["mse_loss_indexes"]) == [14, 15, 16, 17, 28]
    assert ints(batch["packed_timesteps"]) == [t1] * 4 + [NEG] * 3 + [t2]
    assert batch["patchified_vae_latent_shapes"] == [(2, 2), (1, 3), (1, 1)]
    assert ints(batch["packed_latent_position_ids"]) == [0, 1, 8, 9, 0, 1, 2, 0]
    assert tuple(batch["padded_images"].shape) == (3, 3, 4, 6)
    assert torch.equal(batch["padded_images"][2, :, :2, :2], b["image_tensor_list"][0])
    check_sample_a(batch, a, t1)
    assert len(batch["ce_loss_indexes"]) == 4  # sample b has no text loss
    assert batch["batch_data_indexes"] == [a["data_indexes"], b["data_indexes"]]
    if cfg.use_flex:
        assert "nested_attention_masks" not in batch
        assert batch["sample_lens"] == [24, 6, 256 - 30]
        assert batch["split_lens"] == A_SPLITS + [3, 3, 256 - 30]
        assert batch["attn_modes"] == A_MODES + ["causal", "noise", "causal"]
    else:
        assert batch["sample_lens"] == [24, 6]
        masks = batch["nested_attention_masks"]
        assert [tuple(m.shape) for m in masks] == [(24, 24), (6, 6)]
        expected = np.where(brute_force_allowed([3, 3], ["causal", "noise"]), 0.0, NEG)
        np.testing.assert_array_equal(masks[1].numpy(), expected)


def test_special_token_loss():
    items = [
        text_item([41, 42], loss=True, special_token_label=900),
        vit_item(1, 1, special_token_label=901),
        vae_item(1, 1, loss=True, special_token_label=902),
    ]
    batch = pack([make_sample(items, CFG)])
    w = float(np.float32(1 / math.sqrt(3)))
    assert ints(batch["packed_text_ids"]) == [B, 41, 42, E, SOI, EOI, SOI, EOI]
    assert ints(batch["ce_loss_indexes"]) == [0, 1, 2, 3, 6, 9]
    assert ints(batch["packed_label_ids"]) == [41, 42, E, 900, 901, 902]
    assert ints(batch["ce_loss_weights"]) == [w, w, w, 1.0, 1.0, 1.0]


def test_text_without_loss_has_no_label_fields():
    batch = pack([make_sample([text_item([1, 2])], CFG)])
    for key in (
        "packed_label_ids",
        "ce_loss_indexes",
        "ce_loss_weights",
        "packed_timesteps",
        "packed_vit_tokens",
        "padded_images",
    ):
        assert key not in batch
    assert ints(batch["packed_position_ids"]) == [0, 1, 2, 3]


# ----------------------------------------------------------------------------------------
# Video plans
# ----------------------------------------------------------------------------------------
def test_video_frames_share_one_split_and_timestep():
    frames = video_items(1, 2, [0, 2, 5], loss=True)
    assert [f.plan.get("split_start", True) for f in frames] == [True, False, False]
    assert [f.plan.get("split_end", True) for f in frames] == [False, False, True]
    assert [f.plan.get("frame_delta") for f in frames] == [2, 3, None]
    sample = make_sample([text_item([3, 4]), *frames], CFG)
    for cfg in (CFG, FLEX):
        batch = pack([sample], cfg, rng=np.random.default_rng(9))
        t = float(np.float32(np.random.default_rng(9).standard_normal()))
        assert batch["sequence_length"] == 16
        assert ints(batch["packed_position_ids"]) == [0, 1, 2, 3] + [4] * 4 + [6] * 4 + [9] * 4
        assert ints(batch["packed_timesteps"]) == [t] * 6  # one draw for the whole split
        assert ints(batch["mse_loss_indexes"]) == [5, 6, 9, 10, 13, 14]
        if cfg.use_flex:
            assert batch["split_lens"][:-1] == [4, 12] and batch["attn_modes"][:-1] == ["causal", "full"]
        else:
            expected = np.where(brute_force_allowed([4, 12], ["causal", "full"]), 0.0, NEG)
            np.testing.assert_array_equal(batch["nested_attention_masks"][0].numpy(), expected)


def test_one_timestep_draw_per_generation_split():
    """Two videos and a single image: three N(0, 1) draws, in plan order."""
    items = [*video_items(1, 1, [0, 1]), vae_item(1, 1, loss=True), *video_items(1, 1, [0, 4, 5])]
    batch = pack([make_sample(items, CFG)], FLEX, rng=np.random.default_rng(4))
    t = np.random.default_rng(4).standard_normal(3).astype(np.float32).tolist()
    assert ints(batch["packed_timesteps"]) == [t[0]] * 2 + [t[1]] + [t[2]] * 3
    assert batch["attn_modes"][:-1] == ["full", "noise", "full"]
    assert batch["split_lens"][:-1] == [6, 3, 9]
    assert ints(batch["packed_position_ids"]) == [0] * 3 + [1] * 3 + [1] * 3 + [1] * 3 + [5] * 3 + [6] * 3


def test_frames_inside_a_multi_frame_split_are_never_dropped():
    """The reference keeps cfg frames of a multi-frame split (its FIXME); the SPEC text
    does not say so. A single-frame split is still dropped."""
    frames = [
        vae_item(1, 1, loss=False, cfg=True, split_end=False, frame_delta=1),
        vae_item(1, 1, loss=False, cfg=True, split_start=False),
    ]
    batch = pack([make_sample([*frames, text_item([5], loss=True)], CFG)], config(vae_cond_dropout_prob=1.0))
    assert batch["patchified_vae_latent_shapes"] == [(1, 1), (1, 1)]
    single = make_sample([vae_item(1, 1, loss=False, cfg=True), text_item([5], loss=True)], CFG)
    batch = pack([single], config(vae_cond_dropout_prob=1.0))
    assert "padded_images" not in batch and ints(batch["packed_position_ids"]) == [1, 2, 3]


def test_text_item_continuing_a_split():
    first, second = text_item([1, 2]), text_item([3])
    first.plan["split_end"] = False
    second.plan["split_start"] = False
    builder = PackBuilder(CFG, TOKENS, np.random.default_rng(0), get_flattened_position_ids_extrapolate)
    builder.add(make_sample([first, second], CFG))
    batch = builder.to_batch()
    assert len(batch["packed_position_ids"]) == batch["sequence_length"] == 7
    check_batch(batch, CFG, TOKENS)


# ----------------------------------------------------------------------------------------
# Dropout
# ----------------------------------------------------------------------------------------
TRIALS = 2000


def assert_rate(count: int, trials: int, p: float):
    sigma = math.sqrt(p * (1 - p) / trials)
    assert abs(count / trials - p) < 5 * sigma, (count, trials, p)


def test_text_dropout_rate_and_alignment():
    cfg = config(text_cond_dropout_prob=0.3)
    sample = make_sample([text_item([7, 8, 9], cfg=True), text_item([21, 22], loss=True)], cfg)
    rng, dropped = np.random.default_rng(11), 0
    for _ in range(TRIALS):
        batch = pack([sample], cfg, rng=rng)
        ids = ints(batch["packed_text_ids"])
        if ids == [B, 21, 22, E]:
            dropped += 1
            assert ints(batch["ce_loss_indexes"]) == [0, 1, 2]
            assert ints(batch["packed_position_ids"]) == [0, 1, 2, 3]
        else:
            assert ids == [B, 7, 8, 9, E, B, 21, 22, E]
            assert ints(batch["ce_loss_indexes"]) == [5, 6, 7]
            assert ints(batch["packed_position_ids"]) == list(range(9))
        assert ints(batch["packed_label_ids"]) == [21, 22, E]
    assert_rate(dropped, TRIALS, 0.3)


def test_vit_dropout_rate_and_alignment():
    cfg = config(vit_cond_dropout_prob=0.4)
    sample = make_sample([vit_item(1, 2, cfg=True), vit_item(2, 1), text_item([5], loss=True)], cfg)
    second = patchify(sample["image_tensor_list"][1], 2)
    rng, dropped = np.random.default_rng(12), 0
    for _ in range(TRIALS):
        batch = pack([sample], cfg, rng=rng)
        positions = ints(batch["packed_position_ids"])
        if ints(batch["vit_token_seqlens"]) == [2]:
            dropped += 1
            assert torch.equal(batch["packed_vit_tokens"], second)  # the second image, not the first
            assert positions == [1] * 4 + [2, 3, 4]  # the dropped image still took rotary id 0
        else:
            assert ints(batch["vit_token_seqlens"]) == [2, 2]
            assert torch.equal(batch["packed_vit_tokens"][2:], second)
            assert positions == [0] * 4 + [1] * 4 + [2, 3, 4]
    assert_rate(dropped, TRIALS, 0.4)


def test_vae_dropout_rate_and_alignment():
    cfg = config(vae_cond_dropout_prob=0.1)
    sample = make_sample(
        [vae_item(1, 2, loss=False, cfg=True), vae_item(2, 1, loss=True), text_item([5], loss=True)], cfg
    )
    second = sample["image_tensor_list"][1]
    rng, dropped = np.random.default_rng(13), 0
    for _ in range(TRIALS):
        batch = pack([sample], cfg, rng=rng)
        positions = ints(batch["packed_position_ids"])
        if batch["patchified_vae_latent_shapes"] == [(2, 1)]:
            dropped += 1
            assert torch.equal(batch["padded_images"][0], second)
            assert positions == [1] * 4 + [1, 2, 3]  # a loss image does not advance the rotary id
        else:
            assert batch["patchified_vae_latent_shapes"] == [(1, 2), (2, 1)]
            assert torch.equal(batch["padded_images"][1, :, :4, :2], second)
            assert positions == [0] * 4 + [1] * 4 + [1, 2, 3]
    assert_rate(dropped, TRIALS, 0.1)


def test_no_dropout_without_enable_cfg():
    cfg = config(text_cond_dropout_prob=1.0, vit_cond_dropout_prob=1.0, vae_cond_dropout_prob=1.0)
    sample = make_sample([text_item([1]), vit_item(1, 1), vae_item(1, 1, loss=False), text_item([2], loss=True)], cfg)
    batch = pack([sample], cfg)
    assert batch["sequence_length"] == 12


# ----------------------------------------------------------------------------------------
# Timesteps
# ----------------------------------------------------------------------------------------
def test_timesteps_are_standard_normal_one_per_image():
    n = 3000
    sample = make_sample([vae_item(1, 2, loss=True) for _ in range(n)], CFG)
    cfg = config(use_flex=True, max_num_tokens=4 * n)
    batch = pack([sample], cfg, rng=np.random.default_rng(21))
    timesteps = batch["packed_timesteps"].numpy().reshape(n, 2)
    assert (timesteps[:, 0] == timesteps[:, 1]).all()  # one value per image
    values = timesteps[:, 0].astype(np.float64)
    assert abs(values.mean()) < 5 / math.sqrt(n)
    assert abs(values.std() - 1) < 5 / math.sqrt(2 * n)
    np.testing.assert_array_equal(values, np.random.default_rng(21).standard_normal(n).astype(np.float32))
    again = pack([sample], cfg, rng=np.random.default_rng(21))
    assert torch.equal(again["packed_timesteps"], batch["packed_timesteps"])
    other = pack([sample], cfg, rng=np.random.default_rng(22))
    assert not torch.equal(other["packed_timesteps"], batch["packed_timesteps"])


# ----------------------------------------------------------------------------------------
# The mixing loop of PackedDataset
# ----------------------------------------------------------------------------------------
def text_of(length_of):
    return lambda i: text_sample(length_of(i), index=i)


def mixed(i: int) -> dict:
    """Text, T2I-like and VLM-like samples in turn, with cfg items."""
    gen = torch.Generator().manual_seed(i)
    kind = i % 3
    if kind == 0:
        items = [text_item(range(i % 7 + 1), loss=True)]
    elif kind == 1:
        items = [text_item([4, 5], cfg=True), vae_item(1 + i % 3, 2, loss=True)]
    else:
        items = [vit_item(2, 1 + i % 2, cfg=True), text_item([9] * (i % 5), loss=True)]
    return make_sample(items, CFG, gen)


def packed(groups: dict, cfg=CFG, weights=None, mandatory=None, seed=42) -> PackedDataset:
    dataset = packed_groups(groups, cfg, TOKENS_DICT, weights=weights, mandatory=mandatory, seed=seed)
    dataset.set_epoch(seed)
    return dataset


def take(dataset: PackedDataset, count: int) -> list[dict]:
    batches = list(itertools.islice(iter(dataset), count))
    for batch in batches:
        check_batch(batch, dataset.config, TOKENS)
    return batches


def ids_of(batch, name=None) -> list:
    return [
        (d["dataset_name"], d["data_indexes"]) if name is None else d["data_indexes"]
        for d in batch["batch_data_indexes"]
        if name is None or d["dataset_name"] == name
    ]


def over_budget_count(dataset: PackedDataset, group: str) -> int:
    stats = dataset.stats
    skips = stats["skips"] if isinstance(stats, dict) else stats.skips
    return skips.get(group, {}).get(SkipReason.OVER_SAMPLE_BUDGET.value, 0)


def model_packs(length_of, cfg: PackingConfig, count: int, mandatory_length_of=None):
    """The SPEC's mixing loop for one weighted group (plus an optional mandatory group),
    over lengths only; the group choice needs no randomness with one weighted group.
    Returns the packs as lists of `(group, index)` and the skipped `(group, index)`."""
    counters = {"g": itertools.count(), "m": itertools.count()}
    lengths = {"g": length_of, "m": mandatory_length_of}
    packs, skipped, buffer, current, curr = [], [], [], [], 0

    def draw(group):
        i = next(counters[group])
        return (group, i), lengths[group](i)

    while len(packs) < count:
        if curr == 0 and mandatory_length_of is not None:
            while True:
                key, length = draw("m")
                if length < cfg.max_num_tokens_per_sample:
                    break
                skipped.append(key)
            current.append(key)
            curr += length
        if curr < cfg.prefer_buffer_before and buffer:
            (key, length), from_buffer = buffer.pop(0), True
        else:
            (key, length), from_buffer = draw("g"), False
            if length > cfg.max_num_tokens_per_sample:
                skipped.append(key)
                continue
        if curr + length > cfg.max_num_tokens:
            if len(buffer) < cfg.max_buffer_size and not from_buffer:
                buffer.append((key, length))
            else:
                packs.append(current)
                current, curr = [], 0
                buffer.insert(0, (key, length))  # kept, unlike the reference
            continue
        current.append(key)
        curr += length
        if curr >= cfg.expected_num_tokens:
            packs.append(current)
            current, curr = [], 0
    return packs, skipped


def test_set_epoch_reaches_every_group():
    groups = {"a": FakeGroup("a", text_of(lambda i: 4)), "b": FakeGroup("b", text_of(lambda i: 4))}
    dataset = packed(groups, seed=42)
    dataset.set_epoch(7)
    assert groups["a"].epoch_seed == groups["b"].epoch_seed == 7


def test_group_choice_follows_the_weights():
    weights = {"a": 1.0, "b": 3.0, "c": 6.0}
    groups = {name: FakeGroup(name, text_of(lambda i: 4)) for name in weights}
    cfg = config(expected_num_tokens=40, max_num_tokens=100, use_flex=True)
    batches = take(packed(groups, cfg, weights), 400)
    assert all(len(batch["batch_data_indexes"]) == 10 for batch in batches)
    counts = {name: sum(len(ids_of(b, name)) for b in batches) for name in weights}
    total = sum(counts.values())
    for name, weight in weights.items():
        assert_rate(counts[name], total, weight / sum(weights.values()))
        assert sorted(ids_of_all(batches, name)) == list(range(counts[name]))  # each group read in order


def ids_of_all(batches, name):
    return [i for batch in batches for i in ids_of(batch, name)]


def test_mandatory_group_opens_every_pack():
    budget = CFG.max_num_tokens_per_sample
    # every 4th mandatory sample is over budget, every 5th exactly at it (also refused: `<`)
    m_len = lambda i: budget + 1 if i % 4 == 3 else budget if i % 5 == 4 else 6 + i % 3  # noqa: E731
    groups = {"m": FakeGroup("m", text_of(m_len)), "g": FakeGroup("g", mixed)}
    cfg = config(expected_num_tokens=60, max_num_tokens=200, max_num_tokens_per_sample=budget)
    dataset = packed(groups, cfg, weights={"m": 0.0, "g": 1.0}, mandatory={"m": True, "g": False})
    batches = take(dataset, 60)
    fitting = list(itertools.islice((i for i in itertools.count() if m_len(i) < budget), len(batches)))
    for batch, expected in zip(batches, fitting):
        assert ids_of(batch)[0] == ("m", expected)
        assert ids_of(batch, "m") == [expected]
    refused = [i for i in range(fitting[-1]) if m_len(i) >= budget]
    assert over_budget_count(dataset, "m") == len(refused)


def test_over_budget_samples_are_skipped_and_counted():
    budget = 40
    length = lambda i: budget + 1 + i % 3 if i % 5 == 0 else budget if i % 5 == 1 else 3 + i % 4  # noqa: E731
    group = FakeGroup("g", text_of(length))
    cfg = config(expected_num_tokens=80, max_num_tokens=100, max_num_tokens_per_sample=budget)
    dataset = packed({"g": group}, cfg)
    batches = take(dataset, 50)
    seen = ids_of_all(batches, "g")
    over = [i for i in group.drawn if length(i) > budget]
    assert over and not set(over) & set(seen)
    assert over_budget_count(dataset, "g") == len(over)
    assert any(length(i) == budget for i in seen)  # at the budget is still packed


def test_expected_num_tokens_triggers_emission():
    dataset = packed({"g": FakeGroup("g", text_of(lambda i: 10))}, config(expected_num_tokens=35, max_num_tokens=100))
    for n, batch in enumerate(take(dataset, 20)):
        assert batch["sequence_length"] == 40
        assert ids_of(batch, "g") == [4 * n, 4 * n + 1, 4 * n + 2, 4 * n + 3]


def test_overflow_sample_comes_first_in_a_later_pack():
    lengths = [30, 30] + [10] * 100
    cfg = config(expected_num_tokens=45, max_num_tokens=50, max_num_tokens_per_sample=40, prefer_buffer_before=20)
    batches = take(packed({"g": FakeGroup("g", text_of(lengths.__getitem__))}, cfg), 3)
    assert [ids_of(b, "g") for b in batches] == [[0, 2, 3], [1, 4, 5], [6, 7, 8, 9, 10]]


def test_full_buffer_emits_and_keeps_the_triggering_sample():
    """The reference would lose sample 2 here; we pack it first in the next pack."""
    lengths = [30, 30, 30] + [5] * 100
    cfg = config(
        expected_num_tokens=45,
        max_num_tokens=50,
        max_num_tokens_per_sample=40,
        prefer_buffer_before=20,
        max_buffer_size=1,
    )
    batches = take(packed({"g": FakeGroup("g", text_of(lengths.__getitem__))}, cfg), 3)
    assert [ids_of(b, "g") for b in batches] == [[0], [2, 3, 4, 5], [1, 6, 7, 8]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mixing_loop_matches_model_and_conserves_samples(seed):
    rng = random.Random(seed)
    table = [rng.choice([rng.randint(2, 12), rng.randint(20, 40), rng.randint(41, 45)]) for _ in range(5000)]
    cfg = config(
        expected_num_tokens=50,
        max_num_tokens=64,
        max_num_tokens_per_sample=40,
        prefer_buffer_before=24,
        max_buffer_size=2,
        use_flex=bool(seed % 2),
    )
    group = FakeGroup("g", text_of(table.__getitem__))
    dataset = packed({"g": group}, cfg)
    batches = take(dataset, 150)
    emitted = [ids_of(b, "g") for b in batches]
    expected, skipped = model_packs(table.__getitem__, cfg, 150)
    assert emitted == [[i for _, i in p] for p in expected]
    flat = [i for p in emitted for i in p]
    assert len(flat) == len(set(flat))  # nothing twice
    over = {i for i in group.drawn if table[i] > cfg.max_num_tokens_per_sample}
    assert not over & set(flat) and over_budget_count(dataset, "g") == len(over)
    assert {i for _, i in skipped} <= over
    pending = set(group.drawn) - set(flat) - over  # only the buffer is pending right after a yield
    assert len(pending) <= cfg.max_buffer_size + 1
    assert any(b["sequence_length"] < cfg.expected_num_tokens for b in batches)  # overflow emits happened


def test_mixing_loop_with_images_dropout_and_mandatory_group():
    cfg = config(
        expected_num_tokens=48,
        max_num_tokens=64,
        max_num_tokens_per_sample=32,
        prefer_buffer_before=16,
        max_buffer_size=3,
        text_cond_dropout_prob=0.3,
        vit_cond_dropout_prob=0.4,
        vae_cond_dropout_prob=0.1,
    )
    groups = {"m": FakeGroup("m", text_of(lambda i: 4 + i % 3)), "x": FakeGroup("x", mixed), "y": FakeGroup("y", mixed)}
    dataset = packed(groups, cfg, weights={"m": 1, "x": 2, "y": 3}, mandatory={"m": True, "x": False, "y": False})
    batches = take(dataset, 80)  # check_batch on every one
    for name, group in groups.items():
        flat = ids_of_all(batches, name)
        assert len(flat) == len(set(flat))
        assert len(set(group.drawn) - set(flat)) <= cfg.max_buffer_size + 1
    assert all(ids_of(b)[0][0] == "m" for b in batches)
    assert any("padded_images" in b for b in batches) and any("packed_vit_tokens" in b for b in batches)


def test_model_check_with_mandatory_group():
    cfg = config(
        expected_num_tokens=50,
        max_num_tokens=64,
        max_num_tokens_per_sample=40,
        prefer_buffer_before=24,
        max_buffer_size=2,
    )
    rng = random.Random(3)
    table = [rng.randint(2, 30) for _ in range(3000)]
    m_len = lambda i: 4 + i % 9  # noqa: E731
    groups = {"m": FakeGroup("m", text_of(m_len)), "g": FakeGroup("g", text_of(table.__getitem__))}
    batches = take(packed(groups, cfg, weights={"m": 0.0, "g": 1.0}, mandatory={"m": True, "g": False}), 100)
    expected, _ = model_packs(table.__getitem__, cfg, 100, mandatory_length_of=m_len)
    assert [ids_of(b) for b in batches] == [[tuple(k) for k in p] for p in expected]


def test_sample_that_never_fits_beside_mandatory_does_not_stall():
    cfg = config(
        expected_num_tokens=90,
        max_num_tokens=100,
        max_num_tokens_per_sample=80,
        prefer_buffer_before=50,
        max_buffer_size=2,
    )
    groups = {"m": FakeGroup("m", text_of(lambda i: 30)), "g": FakeGroup("g", text_of(lambda i: 80 if i == 0 else 10))}
    dataset = packed(groups, cfg, weights={"m": 0.0, "g": 1.0}, mandatory={"m": True, "g": False})
    batches = take(dataset, 10)
    packed_g = ids_of_all(batches, "g")
    assert packed_g and 0 not in packed_g, [ids_of(b) for b in batches]
    # 30 mandatory + 80 > 100: sample 0 can never fit, so it is dropped once, for that reason.
    assert dataset.stats["skips"]["g"] == {SkipReason.NO_ROOM_BESIDE_MANDATORY.value: 1}
    assert sorted(packed_g) == list(range(1, len(packed_g) + 1)), "every other sample is packed in order"


def test_buffer_stays_bounded_when_mandatory_samples_fill_prefer_buffer_before():
    cfg = config(
        expected_num_tokens=90,
        max_num_tokens=100,
        max_num_tokens_per_sample=80,
        prefer_buffer_before=50,
        max_buffer_size=2,
    )
    long_every_10th = lambda i: 80 if i % 10 == 0 else 10  # noqa: E731
    groups = {"m": FakeGroup("m", text_of(lambda i: 60)), "g": FakeGroup("g", text_of(long_every_10th))}
    dataset = packed(groups, cfg, weights={"m": 0.0, "g": 1.0}, mandatory={"m": True, "g": False})
    batches = take(dataset, 100)
    pending = set(groups["g"].drawn) - set(ids_of_all(batches, "g"))
    counted = sum(dataset.stats["skips"].get("g", {}).values())
    assert counted > 0, "the long samples cannot fit beside the mandatory one: counted skips"
    assert len(pending) - counted <= cfg.max_buffer_size + 1, sorted(pending)
    assert len(dataset.state_dict()["stages"]["overflow"]["buffer"]) <= cfg.max_buffer_size


# ----------------------------------------------------------------------------------------
# check_batch itself
# ----------------------------------------------------------------------------------------
def valid_batch(cfg=CFG) -> dict:
    items = [text_item([61], loss=True), vit_item(1, 2), vae_item(1, 1, loss=False)]
    third = make_sample(items, CFG, torch.Generator().manual_seed(5), index=8)
    return pack([sample_a(), sample_b(), third], cfg, rng=np.random.default_rng(1))


def drop_text_index(b):
    b["packed_text_indexes"], b["packed_text_ids"] = b["packed_text_indexes"][1:], b["packed_text_ids"][1:]


def set_(key, index, value):
    def corrupt(b):
        b[key] = b[key].clone()
        b[key][index] = value

    return corrupt


CORRUPTIONS = {
    "text index removed": drop_text_index,
    "vit index removed": lambda b: b.update(packed_vit_token_indexes=b["packed_vit_token_indexes"][:-1]),
    "vae index duplicated": set_("packed_vae_token_indexes", 1, 14),
    "text indexes swapped": lambda b: b.update(packed_text_indexes=b["packed_text_indexes"][[1, 0, *range(2, 23)]]),
    "mask value changed": lambda b: b["nested_attention_masks"][0].__setitem__((3, 2), 0.5),
    "mask diagonal masked": lambda b: b["nested_attention_masks"][1].__setitem__((0, 0), NEG),
    "mask shape wrong": lambda b: b["nested_attention_masks"].__setitem__(1, torch.zeros(5, 5)),
    "mask missing": lambda b: b["nested_attention_masks"].pop(),
    "sample_lens off by one": lambda b: b["sample_lens"].__setitem__(0, b["sample_lens"][0] + 1),
    "sequence_length off by one": lambda b: b.update(sequence_length=b["sequence_length"] + 1),
    "position ids not restarting": set_("packed_position_ids", 24, 1),
    "position id changed inside an image": set_("packed_position_ids", 8, 4),
    "position id changed on an end token": set_("packed_position_ids", 12, 6),
    "start_of_image replaced": set_("packed_text_ids", 5, B),
    "end_of_image replaced": set_("packed_text_ids", 6, E),
    "ce index on a vit position": set_("ce_loss_indexes", 3, 6),
    "labels truncated": lambda b: b.update(packed_label_ids=b["packed_label_ids"][:-1]),
    "weights dtype": lambda b: b.update(ce_loss_weights=b["ce_loss_weights"].double()),
    "text ids dtype": lambda b: b.update(packed_text_ids=b["packed_text_ids"].int()),
    "no-loss timestep made finite": set_("packed_timesteps", 5, 0.25),
    "timesteps differ inside an image": set_("packed_timesteps", 1, 0.123),
    "mse index removed": lambda b: b.update(mse_loss_indexes=b["mse_loss_indexes"][1:]),
    "vit seqlens off by one": set_("vit_token_seqlens", 0, 5),
    "vit token rows missing": lambda b: b.update(packed_vit_tokens=b["packed_vit_tokens"][:-1]),
    "vit position out of table": set_("packed_vit_position_ids", 0, 64),
    "latent position out of table": set_("packed_latent_position_ids", 0, 64),
    "latent shape wrong": lambda b: b["patchified_vae_latent_shapes"].__setitem__(1, (3, 1)),
    "padded images too small": lambda b: b.update(padded_images=b["padded_images"][:, :, :3, :]),
    "padded image missing": lambda b: b.update(padded_images=b["padded_images"][:-1]),
    "vit group partly missing": lambda b: b.pop("packed_vit_position_ids"),
    "data index missing": lambda b: b["batch_data_indexes"].pop(),
}


def shift_boundary(splits: list, i: int) -> list:
    """Move the boundary after split `i` one token later (the sums stay the same)."""
    return [*splits[:i], splits[i] + 1, splits[i + 1] - 1, *splits[i + 2 :]]


FLEX_CORRUPTIONS = {
    "split_lens off by one": lambda b: b["split_lens"].__setitem__(0, b["split_lens"][0] + 1),
    "padding split not causal": lambda b: b["attn_modes"].__setitem__(-1, "full"),
    "padding sample_lens wrong": lambda b: b["sample_lens"].__setitem__(-1, b["sample_lens"][-1] - 1),
    "split crossing samples": lambda b: b.update(split_lens=shift_boundary(b["split_lens"], 3)),
    "dense masks present": lambda b: b.update(nested_attention_masks=[]),
}


def test_check_batch_accepts_valid_batches():
    for cfg in (CFG, FLEX):
        check_batch(valid_batch(cfg), cfg, TOKENS)


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_check_batch_rejects(name):
    batch = valid_batch()
    CORRUPTIONS[name](batch)
    with pytest.raises(InvariantError):
        check_batch(batch, CFG, TOKENS)


@pytest.mark.parametrize("name", list(FLEX_CORRUPTIONS))
def test_check_batch_rejects_flex(name):
    batch = valid_batch(FLEX)
    FLEX_CORRUPTIONS[name](batch)
    with pytest.raises(InvariantError):
        check_batch(batch, FLEX, TOKENS)


def test_invariant_error_is_an_assertion_error():
    assert issubclass(InvariantError, AssertionError)


def test_carried_sample_that_exactly_fills_beside_the_mandatory_ones_is_packed():
    """Boundary of the carry rule: a carried sample that brings the pack to exactly
    `max_num_tokens` next to the mandatory samples fits; only one more token would not."""
    cfg = config(
        expected_num_tokens=95,
        max_num_tokens=100,
        max_num_tokens_per_sample=80,
        prefer_buffer_before=0,
        max_buffer_size=0,  # an overflowing sample is carried at once
    )
    g_len = [50, 70, 10, 10].__getitem__  # 30 + 50 = 80; + 70 overflows -> carried; 30 + 70 = 100
    groups = {"m": FakeGroup("m", text_of(lambda i: 30)), "g": FakeGroup("g", text_of(g_len))}
    dataset = packed(groups, cfg, weights={"m": 0.0, "g": 1.0}, mandatory={"m": True, "g": False})
    first, second = take(dataset, 2)
    assert ids_of(first) == [("m", 0), ("g", 0)]
    assert ids_of(second) == [("m", 1), ("g", 1)]
    assert second["sequence_length"] == cfg.max_num_tokens
    assert not dataset.stats["skips"].get("g")


def test_stats_count_the_packs_and_tokens_emitted():
    """`stats` is what users read for throughput: packs and tokens must be the emitted ones."""
    group = FakeGroup("g", text_of(lambda i: 5 + i % 17))
    dataset = packed({"g": group}, config(expected_num_tokens=60, max_num_tokens=100))
    batches = take(dataset, 12)
    assert dataset.stats["packs"] == 12
    assert dataset.stats["tokens"] == sum(batch["sequence_length"] for batch in batches)
    assert dataset.stats["samples"] == {"g": sum(len(batch["batch_data_indexes"]) for batch in batches)}


def test_stats_before_any_iteration_are_zero():
    dataset = packed({"g": FakeGroup("g", text_of(lambda i: 5))}, config())
    assert dataset.stats == {"packs": 0, "tokens": 0, "samples": {}, "skips": {}, "history": None, "read_ahead": {}}


def test_a_plan_that_opens_without_split_start_still_starts_a_fresh_split():
    """`split_start` defaults to true, and a user's plan that says false on its first item
    has no split to continue: its tokens count from zero, so the split lengths still add
    up to the sample (the reference would fail on such a plan)."""
    first = text_item([5, 6, 7])
    first.plan["split_start"] = False
    batch = pack([make_sample([first, text_item([8])], CFG)], FLEX)
    assert batch["split_lens"][:-1] == [5, 3] and sum(batch["split_lens"][:-1]) == batch["sample_lens"][0]


def test_check_batch_names_an_empty_sample():
    batch = valid_batch()
    batch["sample_lens"] = [0, *batch["sample_lens"]]
    batch["batch_data_indexes"] = [dict(batch["batch_data_indexes"][0]), *batch["batch_data_indexes"]]
    with pytest.raises(InvariantError, match="empty sample"):
        check_batch(batch, CFG, TOKENS)
