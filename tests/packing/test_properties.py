"""Property tests: random plans keep every pack invariant; random rows never crash a family.

Inputs are untrusted in production (hand-written JSONL, scraped captions), so the VLM
row-to-plan path is driven with arbitrary JSON values: every row must give either a sample
consistent with its conversation or a named, counted skip.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bagel_data import FrameSampler, ImageTransform, SftJSONLIterableDataset
from bagel_data.errors import SkipLog, SkipReason
from bagel_data.families.conversation import IMAGE_TAG, conversation_to_elements
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.invariants import check_batch
from bagel_data.packing.layout import get_flattened_position_ids_extrapolate
from bagel_data.packing.pack import PackBuilder
from helpers.builders import solid_jpeg
from helpers.plans import TOKENS, make_sample, text_item, vae_item, video_items, vit_item

# ---------------------------------------------------------------------------------------
# Random plans through the packer
# ---------------------------------------------------------------------------------------
text_items = st.builds(
    lambda n, loss, cfg, label: text_item(range(10, 10 + n), loss=loss, cfg=cfg, special_token_label=label),
    st.integers(0, 6), st.booleans(), st.booleans(), st.sampled_from([None, 42]),
)  # fmt: skip
vit_items = st.builds(lambda h, w, cfg: vit_item(h, w, cfg=cfg), st.integers(1, 3), st.integers(1, 3), st.booleans())
vae_items = st.builds(
    lambda h, w, loss, cfg: vae_item(h, w, loss=loss, cfg=cfg), st.integers(1, 3), st.integers(1, 3), st.booleans(),
    st.booleans(),
)  # fmt: skip
videos = st.builds(
    lambda h, w, gaps: video_items(h, w, list(np.cumsum([0, *gaps]))), st.integers(1, 2), st.integers(1, 2),
    st.lists(st.integers(1, 3), min_size=1, max_size=3),
)  # fmt: skip


def flatten(plan) -> list:
    items = []
    for entry in plan:
        items.extend(entry if isinstance(entry, tuple) else [entry])
    return items


# Every family's plan has an item that dropout cannot remove (the loss-bearing one), so a
# sample never vanishes from its pack; the random plans keep that property.
plans = st.lists(st.one_of(text_items, vit_items, vae_items, videos.map(tuple)), min_size=1, max_size=5).filter(
    lambda plan: any(not item.plan["enable_cfg"] for item in flatten(plan))
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    samples=st.lists(plans, min_size=1, max_size=4),
    use_flex=st.booleans(),
    dropout=st.sampled_from([0.0, 0.5, 1.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_plans_keep_every_pack_invariant(samples, use_flex, dropout, seed):
    config = PackingConfig(
        max_num_tokens=10_000,
        use_flex=use_flex,
        text_cond_dropout_prob=dropout,
        vit_cond_dropout_prob=dropout,
        vae_cond_dropout_prob=dropout,
        vit_patch_size=2,
        vae_image_downsample=2,
        max_num_patch_per_side=8,
        max_latent_size=8,
    )
    builder = PackBuilder(config, TOKENS, np.random.default_rng(seed), get_flattened_position_ids_extrapolate)
    generator = torch.Generator().manual_seed(seed % 1000)
    for index, plan in enumerate(samples):
        builder.add(make_sample(flatten(plan), config, generator, index=index))
    check_batch(builder.to_batch(), config, TOKENS)


# ---------------------------------------------------------------------------------------
# Random conversations through the VLM family
# ---------------------------------------------------------------------------------------
turn_text = st.lists(st.sampled_from(["hello", " ", "\n", IMAGE_TAG, "<video>", "what?", "猫"]), max_size=5).map(
    "".join
)
turns = st.fixed_dictionaries({"from": st.sampled_from(["human", "gpt", "system"]), "value": turn_text})
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)
rows = st.one_of(
    st.fixed_dictionaries(
        {"conversations": st.lists(turns, max_size=4)},
        optional={"image": st.sampled_from(["a.jpg", ["a.jpg"], ["a.jpg", "a.jpg"], "missing.jpg", 3])},
    ),
    json_values,
)


@pytest.fixture(scope="module")
def vlm_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vlm")
    (folder / "a.jpg").write_bytes(solid_jpeg(40, 30, (200, 30, 30)))
    (folder / "train.jsonl").write_text('{"conversations": []}\n')
    return folder


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=rows)
def test_any_row_gives_a_consistent_sample_or_a_named_skip(row, vlm_folder, tokenizer):
    (vlm_folder / "train.jsonl").write_text(json.dumps(row) + "\n")
    dataset = SftJSONLIterableDataset(
        "vlm_sft",
        ImageTransform(56, 28, 14),
        tokenizer,
        FrameSampler(4, 2),
        [str(vlm_folder / "train.jsonl")],
        [str(vlm_folder)],
        [10],
        num_workers=1,
    )
    log = SkipLog("vlm_sft")
    produced = list(dataset.iter_pass(log))
    assert len(produced) + sum(log.counts.values()) == 1, "one row: one sample or one counted skip"
    assert set(log.counts) <= {reason.value for reason in SkipReason}
    if not produced:
        return
    sample = produced[0][1]
    plan = sample["sequence_plan"]
    images = [item for item in plan if item["type"] == "vit_image"]
    texts = [item for item in plan if item["type"] == "text"]
    assert len(images) == len(sample["image_tensor_list"])
    assert len(texts) == len(sample["text_ids_list"]) and all(sample["text_ids_list"])
    assert any(item["loss"] for item in plan)
    expected = conversation_to_elements(row["conversations"], len(images))
    kept = [e for e in expected if e["type"] == "image" or tokenizer.encode(e["text"])]
    assert [e["type"] for e in kept] == ["image" if item["type"] == "vit_image" else "text" for item in plan]
    assert [e["has_loss"] for e in kept if e["type"] == "text"] == [item["loss"] for item in texts]
    tokens = sum(len(ids) for ids in sample["text_ids_list"])
    tokens += sum(t.shape[1] * t.shape[2] // 14**2 for t in sample["image_tensor_list"])
    assert sample["num_tokens"] == tokens
