"""CFG dropout decided when a sample is drawn (packing/dropout.py), in the default mode.

What must hold: every length the packer steers by is the length it packs (so best-fit packs
fill as with no dropout, and token shares meet their targets), each decision is the
sample's own (the same when rebuilt, the configured rate over many samples), resume stays
exact, and compat="bagel" keeps drawing at pack time, as the reference does.
"""

from __future__ import annotations

import collections
import itertools
import math

import numpy as np
import pytest

from bagel_data.compat import CompatPolicy
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.dropout import decide_dropout
from bagel_data.packing.groups import GroupSource
from bagel_data.packing.invariants import check_batch
from bagel_data.sample import full_length
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.plans import TOKENS, TOKENS_DICT, make_sample, text_item, vae_item, vit_item

DROPOUTS = dict(text_cond_dropout_prob=0.1, vit_cond_dropout_prob=0.4, vae_cond_dropout_prob=0.1)


def _config(**changes) -> PackingConfig:
    base = dict(
        expected_num_tokens=380,
        max_num_tokens=400,
        max_num_tokens_per_sample=200,
        prefer_buffer_before=200,
        max_buffer_size=20,
        use_flex=True,
        vae_image_downsample=2,
        vit_patch_size=2,
        max_latent_size=16,
        max_num_patch_per_side=16,
        **DROPOUTS,
    )
    return PackingConfig(**{**base, **changes})


def _sample_maker(cfg: PackingConfig, name: str, kind: str):
    """Samples of three shapes, as T2I, edit and VLM give them: each with CFG items."""
    rng = np.random.default_rng(hash(kind) % 2**32)
    sizes = rng.integers(2, 7, size=(10_000, 3))

    def make(i: int) -> dict:
        a, b, c = (int(v) for v in sizes[i])
        if kind == "t2i":
            items = [text_item(list(range(3 * a)), cfg=True), vae_item(b, c, loss=True)]
        elif kind == "edit":
            items = [
                vae_item(a, b, loss=False, cfg=True),
                vit_item(a, b, cfg=True),
                text_item(list(range(2 * c)), cfg=True),
                vae_item(a, b, loss=True),
            ]
        else:
            items = [vit_item(b, c, cfg=True), text_item(list(range(a)), cfg=True), text_item([7] * 4 * c, loss=True)]
        return make_sample(items, cfg, index=i, dataset_name=name)

    return make


def _groups(cfg):
    return {name: FakeGroup(name, _sample_maker(cfg, name, name)) for name in ("t2i", "edit", "vlm")}


def _take(dataset, count: int) -> list[dict]:
    batches = list(itertools.islice(iter(dataset), count))
    for batch in batches:
        check_batch(batch, dataset.config, TOKENS)
    return batches


def _fill(batches, cfg) -> float:
    return float(np.mean([sum(b["sample_lens"][:-1]) / cfg.max_num_tokens for b in batches]))


def _token_shares(batches) -> dict:
    tokens: collections.Counter = collections.Counter()
    for batch in batches:
        for where, length in zip(batch["batch_data_indexes"], batch["sample_lens"]):
            tokens[where["dataset_name"]] += length
    total = sum(tokens.values())
    return {name: count / total for name, count in tokens.items()}


def test_best_fit_fills_packs_as_well_with_dropout_as_without():
    """The reference's order (count, place, then drop) leaves best-fit packs short by the
    dropped items; deciding first fills them as with no dropout."""
    weights = {"t2i": 0.5, "edit": 0.3, "vlm": 0.2}
    fills = {}
    for label, dropouts in (("dropout", DROPOUTS), ("none", dict.fromkeys(DROPOUTS, 0.0))):
        cfg = _config(pack_strategy="best_fit", **dropouts)
        dataset = packed_groups(_groups(cfg), cfg, TOKENS_DICT, weights=weights)
        fills[label] = _fill(_take(dataset, 150), cfg)
    assert fills["none"] >= 0.99
    assert fills["dropout"] >= 0.99, fills


def test_token_shares_meet_their_targets_with_dropout():
    weights = {"t2i": 0.5, "edit": 0.3, "vlm": 0.2}
    cfg = _config(mix_by="tokens", pack_strategy="best_fit")
    shares = _token_shares(_take(packed_groups(_groups(cfg), cfg, TOKENS_DICT, weights=weights), 200))
    for name, weight in weights.items():
        assert abs(shares[name] - weight) < 0.01, shares


def test_every_sample_packs_at_the_length_the_packer_counted():
    """The mixer's per-group token counts are the packed tokens, samples waiting included."""
    weights = {"t2i": 0.5, "edit": 0.3, "vlm": 0.2}
    cfg = _config(mix_by="tokens")
    dataset = packed_groups(_groups(cfg), cfg, TOKENS_DICT, weights=weights)
    batches = _take(dataset, 60)
    state = dataset._live
    packed = collections.Counter()
    for batch in batches:
        for where, length in zip(batch["batch_data_indexes"], batch["sample_lens"]):
            packed[where["dataset_name"]] += length
    for item in [*state.overflow.buffer, *([state.overflow.carry] if state.overflow.carry else [])]:
        packed[dataset.group_names[item.group]] += item.length
    counts = state.stages["choose"].state_dict()["group_tokens"]  # the group choice's own state
    assert counts == dict(packed)


def _item_sizes(sample: dict, cfg: PackingConfig) -> list[int]:
    """Each plan item's packed tokens, begin and end included."""
    texts, images = iter(sample["text_ids_list"]), iter(sample["image_tensor_list"])
    sizes = []
    for item in sample["sequence_plan"]:
        if item["type"] == "text":
            sizes.append(len(next(texts)) + 2)
        else:
            image = next(images)
            stride = cfg.vit_patch_size if item["type"] == "vit_image" else cfg.vae_image_downsample
            sizes.append((image.shape[1] // stride) * (image.shape[2] // stride) + 2)
    return sizes


def test_a_decision_is_the_samples_own_and_has_the_configured_rate():
    # A rate of its own per kind: the VAE condition, the ViT image and the text each drop at theirs.
    cfg = _config(text_cond_dropout_prob=0.2, vit_cond_dropout_prob=0.5, vae_cond_dropout_prob=0.3)
    make = _sample_maker(cfg, "edit", "edit")
    group = GroupSource.of(0, "edit", FakeGroup("edit", make))
    dropped: collections.Counter = collections.Counter()
    trials = 2000
    for i in range(trials):
        sample, again = make(i), make(i)
        decision = decide_dropout(sample, cfg, group.dropout_rng(7, (i,), None), CompatPolicy())
        assert decision == decide_dropout(again, cfg, group.dropout_rng(7, (i,), None), CompatPolicy())
        sizes = _item_sizes(sample, cfg)
        assert decision.tokens == sum(sizes[index] for index in decision.items)
        dropped.update(decision.items)
    for index, rate in ((0, 0.3), (1, 0.5), (2, 0.2)):  # cfg VAE condition, ViT image, text
        sigma = math.sqrt(rate * (1 - rate) / trials)
        assert abs(dropped[index] / trials - rate) < 5 * sigma, index
    assert dropped[3] == 0  # the generated image has no CFG: never dropped


def test_the_packed_sample_matches_its_decision():
    cfg = _config(text_cond_dropout_prob=0.5, vit_cond_dropout_prob=0.5, vae_cond_dropout_prob=0.5)
    dataset = packed_groups({"edit": FakeGroup("edit", _sample_maker(cfg, "edit", "edit"))}, cfg, TOKENS_DICT)
    make = _sample_maker(cfg, "edit", "edit")
    for batch in _take(dataset, 30):
        for where, length in zip(batch["batch_data_indexes"], batch["sample_lens"]):
            sample, cursor = make(where["data_indexes"]), (where["data_indexes"],)
            rng = dataset.groups[0].dropout_rng(dataset.data_seed, cursor, None)
            assert length == full_length(sample) - decide_dropout(sample, cfg, rng, CompatPolicy()).tokens


@pytest.mark.parametrize("cut", [1, 17, 33])
@pytest.mark.parametrize("strategy", ["greedy", "best_fit"])
def test_resume_is_exact_with_dropout(strategy, cut):
    weights = {"t2i": 0.5, "edit": 0.3, "vlm": 0.2}
    cfg = _config(mix_by="tokens", pack_strategy=strategy)
    full = _take(packed_groups(_groups(cfg), cfg, TOKENS_DICT, weights=weights), 40)
    first = packed_groups(_groups(cfg), cfg, TOKENS_DICT, weights=weights)
    stream = iter(first)
    head = list(itertools.islice(stream, cut))
    state = first.state_dict()
    resumed = packed_groups(_groups(cfg), cfg, TOKENS_DICT, weights=weights)
    resumed.load_state_dict(state)
    tail = list(itertools.islice(iter(resumed), 40 - cut))
    for want, got in zip(full, head + tail):
        assert want["sample_lens"] == got["sample_lens"]
        assert want["batch_data_indexes"] == got["batch_data_indexes"]
        assert want["packed_text_ids"].tolist() == got["packed_text_ids"].tolist()


def test_compat_keeps_the_reference_draw_at_pack_time():
    """compat="bagel": no decision at draw time; the pack's own generator drops items as
    they are laid, so the pack holds fewer tokens than the lengths counted."""
    cfg = _config(text_cond_dropout_prob=1.0, vit_cond_dropout_prob=0.0, vae_cond_dropout_prob=0.0)
    group = FakeGroup("t2i", _sample_maker(cfg, "t2i", "t2i"))
    dataset = packed_groups({"t2i": group}, cfg, TOKENS_DICT, policy=CompatPolicy("bagel", seed=0))
    batch = next(iter(dataset))
    counted = sum(full_length(group.make(i)) for i in group.drawn)  # every sample drawn, whole
    assert all(item.dropped is None for item in dataset._live.overflow.buffer)
    assert batch["sequence_length"] < counted


# -- exact decisions: each kind's own probability and its own stride ------------------------
def _decided(config, items):
    decided = decide_dropout(make_sample(items, config), config, np.random.default_rng(0), CompatPolicy())
    return decided.items, decided.tokens


def test_vae_only_dropout_drops_exactly_the_whole_vae_cfg_items():
    config = PackingConfig(text_cond_dropout_prob=0.0, vit_cond_dropout_prob=0.0, vae_cond_dropout_prob=1.0)
    items = [
        text_item([1, 2, 3], cfg=True),
        vit_item(2, 3, cfg=True),
        vae_item(2, 2, loss=False, cfg=True),  # dropped: 4 latents + 2 markers
        vae_item(1, 3, loss=False, cfg=False),  # no enable_cfg
        vae_item(3, 1, loss=False, cfg=True, split_end=False),  # a frame inside a split
        vae_item(5, 5, loss=True, cfg=True, split_start=False),
    ]
    assert _decided(config, items) == (frozenset({2}), 4 + 2)


def test_vit_and_vae_strides_that_differ_each_count_their_own_tokens():
    config = PackingConfig(vit_patch_size=14, vae_image_downsample=32, vit_cond_dropout_prob=1.0,
                           vae_cond_dropout_prob=1.0, text_cond_dropout_prob=0.0)  # fmt: skip
    # 2 x 3 ViT patches (28 x 42 pixels) and 2 x 3 VAE latents (64 x 96 pixels).
    dropped, saved = _decided(config, [vit_item(2, 3, cfg=True), vae_item(2, 3, loss=False, cfg=True)])
    assert dropped == frozenset({0, 1}) and saved == (6 + 2) + (6 + 2)


def test_text_only_dropout_counts_the_ids_and_the_two_markers():
    config = PackingConfig(text_cond_dropout_prob=1.0, vit_cond_dropout_prob=0.0, vae_cond_dropout_prob=0.0)
    items = [text_item([1, 2, 3, 4], cfg=True), vit_item(1, 1, cfg=True), text_item([5], cfg=False)]
    assert _decided(config, items) == (frozenset({0}), 6)


def test_one_draw_per_droppable_item_in_plan_order():
    """The generator is asked once for each item that may drop, none for the others: the
    same decisions come from the same generator whatever items sit between them."""

    class Recorded:
        def __init__(self, draws):
            self.draws, self.asked = list(draws), 0

        def random(self):
            self.asked += 1
            return self.draws.pop(0)

    config = PackingConfig(text_cond_dropout_prob=0.5, vit_cond_dropout_prob=0.5, vae_cond_dropout_prob=0.5)
    items = [
        text_item([1, 2], cfg=False),
        text_item([3], cfg=True),
        vit_item(1, 1, cfg=False),
        vit_item(1, 1, cfg=True),
    ]
    sample = make_sample(items, config)
    rng = Recorded([0.9, 0.1])
    dropout = decide_dropout(sample, config, rng, CompatPolicy.of(None))  # type: ignore[arg-type]
    assert rng.asked == 2 and dropout.items == frozenset({3})


def test_the_multi_frame_rule_has_one_home_asked_of_the_policy():
    """A frame inside a multi-frame split never drops in the default mode (at draw time and
    in the pack alike); compat="bagel" draws for it, as the reference, and may drop it."""
    from bagel_data.packing.dropout import is_droppable
    from bagel_data.packing.layout import get_flattened_position_ids_extrapolate
    from bagel_data.packing.pack import PackBuilder

    cfg = _config(text_cond_dropout_prob=0.0, vit_cond_dropout_prob=0.0, vae_cond_dropout_prob=1.0)
    frames = [
        vae_item(2, 2, loss=False, cfg=True, split_end=False, frame_delta=1),
        vae_item(2, 2, loss=False, cfg=True, split_start=False),
        vae_item(2, 2, loss=False, cfg=True),  # a split of its own: droppable in both modes
    ]
    sample = make_sample([*frames, text_item([5], loss=True)], cfg)
    default, compat = CompatPolicy(), CompatPolicy("bagel")
    plan = sample["sequence_plan"]
    assert [is_droppable(item, default) for item in plan] == [False, False, True, True]
    assert all(is_droppable(item, compat) for item in plan)
    assert decide_dropout(sample, cfg, np.random.default_rng(0), default).items == {2}
    kept = {}
    for name, policy in (("default", default), ("compat", compat)):
        builder = PackBuilder(
            cfg, TOKENS, np.random.default_rng(0), get_flattened_position_ids_extrapolate, None, policy
        )
        builder.add(sample)
        kept[name] = len(builder.latent_shapes)
    assert kept == {"default": 2, "compat": 0}


@pytest.mark.parametrize("kind", ["text", "vit_image", "vae_image"])
def test_one_kind_alone_at_rate_1_drops_in_the_packed_stream(kind):
    """Only one kind's probability set (the others 0): the packer still decides dropout, and
    every packed sample is its full length less exactly that kind's CFG items."""
    rates = {"text": 0.0, "vit_image": 0.0, "vae_image": 0.0, kind: 1.0}
    cfg = _config(
        text_cond_dropout_prob=rates["text"],
        vit_cond_dropout_prob=rates["vit_image"],
        vae_cond_dropout_prob=rates["vae_image"],
    )
    make = _sample_maker(cfg, "edit", "edit")
    dataset = packed_groups({"edit": FakeGroup("edit", make)}, cfg, TOKENS_DICT)
    for batch in _take(dataset, 5):
        for where, length in zip(batch["batch_data_indexes"], batch["sample_lens"]):
            sample = make(where["data_indexes"])
            sizes = _item_sizes(sample, cfg)
            plan = sample["sequence_plan"]
            saved = sum(size for item, size in zip(plan, sizes) if item["type"] == kind and item["enable_cfg"] == 1)
            assert saved > 0 and length == full_length(sample) - saved, (kind, where)
