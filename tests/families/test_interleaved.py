"""The code-free interleaved family: segments with roles become exactly the planned items.

Documents cover text-only, image understanding, generation, a generated video and an edit
chain; each is tagged by a unique word in its first text, so a packed sample can be traced
back to its document. Dropout is off, so every segment reaches the pack and the loss
positions can be compared with what the test itself declares.
"""

from __future__ import annotations

import itertools

import pytest

from bagel_data import ConfigError, make_bagel_multimodal_dataset
from bagel_data.packing.invariants import check_batch
from helpers.builders import png_bytes
from helpers.interleaved import write_interleaved, write_interleaved_jsonl

IMG = png_bytes(64, 64, (200, 30, 30))  # 64x64 under the transforms below: 4x4 latents
LATENTS = 16


def text(words, **flags):
    return {"type": "text", "text": words, **flags}


def image(**flags):
    return {"type": "image", "image": IMG, **flags}


def video(n, **flags):
    return {"type": "video", "frames": [IMG] * n, "frame_indexes": [0, 2, 5][:n], **flags}


# (document, texts that carry a loss, generated latent tokens)
DOCS = {
    "alpha": ([text("alpha is a text only document", supervised=True)], ["alpha is a text only document"], 0),
    "bravo": (
        [image(understood=True, conditioned=False, generated=False), text("bravo describes the image")],
        ["bravo describes the image"],
        0,
    ),
    "charlie": ([text("charlie draws a red square", supervised=False), image(generated=True)], [], LATENTS),
    "delta": ([text("delta films a clip", supervised=False), video(3, generated=True)], [], 3 * LATENTS),
    "echo": (
        [image(), text("echo first make it blue", supervised=False), image(), text("echo then answer")],
        ["echo then answer"],
        LATENTS,
    ),
}

GROUP = {
    "dataset_names": ["docs"],
    "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32},
    "vit_image_transform_args": {"image_stride": 14, "max_image_size": 56, "min_image_size": 28},
    "num_used_data": [1],
    "weight": 1,
}
PACKING = dict(
    expected_num_tokens=400,
    max_num_tokens=600,
    max_num_tokens_per_sample=300,
    prefer_buffer_before=200,
    max_buffer_size=4,
    text_cond_dropout_prob=0.0,
    vit_cond_dropout_prob=0.0,
    vae_cond_dropout_prob=0.0,
)


def build(tokenizer, special_tokens, info, group=GROUP, **overrides):
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets={"interleaved": group},
        dataset_info={"interleaved": {"docs": info}},
        num_workers=1,
        **dict(PACKING, **overrides),
    )


@pytest.fixture
def parquet_info(tmp_path):
    write_interleaved(tmp_path / "docs" / "part-0.parquet", [[doc] for doc, _, _ in DOCS.values()])
    return {"data_dir": str(tmp_path / "docs")}


def _spans(batch):
    ends = list(itertools.accumulate(batch["sample_lens"][: len(batch["batch_data_indexes"])]))
    return zip([0, *ends[:-1]], ends)


def _in(indexes, start, end):
    return [i for i, p in enumerate(indexes.tolist()) if start <= p < end]


@pytest.mark.parametrize("use_flex", [False, True])
def test_loss_positions_are_exactly_the_marked_segments(tokenizer, special_tokens, parquet_info, use_flex):
    dataset = build(tokenizer, special_tokens, parquet_info, use_flex=use_flex)
    seen = set()
    for batch in itertools.islice(iter(dataset), 6):
        check_batch(batch, dataset.config, dataset.special_tokens)
        for start, end in _spans(batch):
            text_at = _in(batch["packed_text_indexes"], start, end)
            words = tokenizer.decode(batch["packed_text_ids"][text_at].tolist())
            name = next(n for n in DOCS if n in words)
            seen.add(name)
            _, supervised, generated = DOCS[name]
            ce = _in(batch.get("ce_loss_indexes", _empty()), start, end)
            labels = batch["packed_label_ids"][ce].tolist() if ce else []
            want = [t for s in supervised for t in tokenizer.encode(s) + [special_tokens["eos_token_id"]]]
            assert labels == want, name
            assert len(_in(batch.get("mse_loss_indexes", _empty()), start, end)) == generated, name
    assert seen == set(DOCS)


def _empty():
    import torch

    return torch.zeros(0, dtype=torch.long)


def test_video_segment_follows_the_reference_plan(tokenizer, special_tokens, parquet_info):
    family = build(tokenizer, special_tokens, parquet_info).grouped_datasets[0]
    family.units.shuffle_buffer_size = 0  # the documents in storage order: the first with 3 frames is the video
    plans = [s["sequence_plan"] for _, s in itertools.islice(family.iter_samples(), len(DOCS))]
    frames = next(p for p in plans if sum(i["type"] == "vae_image" for i in p) == 3)[1:]
    assert [f["split_start"] for f in frames] == [True, False, False]
    assert [f["split_end"] for f in frames] == [False, False, True]
    assert [f.get("frame_delta") for f in frames] == [2, 3, None]
    assert all(f["loss"] == 1 and f["enable_cfg"] == 0 for f in frames)


def test_group_defaults_decide_unmarked_segments(tokenizer, special_tokens, tmp_path):
    doc = [text("intro words"), image(), text("middle words"), image(), text("closing words")]
    write_interleaved(tmp_path / "d" / "p.parquet", [[doc], [doc]])
    group = dict(GROUP, segment_defaults={"text_loss": "after_first_image", "first_image": ["understood"]})
    family = build(tokenizer, special_tokens, {"data_dir": str(tmp_path / "d")}, group).grouped_datasets[0]
    _, sample = next(family.iter_samples())
    kinds = [(i["type"], i["loss"]) for i in sample["sequence_plan"]]
    assert kinds == [
        ("text", 0),
        ("vit_image", 0),
        ("text", 1),
        ("vae_image", 1),
        ("vae_image", 0),
        ("vit_image", 0),
        ("text", 1),
    ]


def test_jsonl_documents_with_image_paths(tokenizer, special_tokens, tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.png").write_bytes(IMG)
    doc = [{"type": "image", "path": "a.png", "understood": True}, text("what is shown", supervised=True)]
    path = write_interleaved_jsonl(tmp_path / "docs.jsonl", [doc, doc, [{"type": "sound"}]])
    info = {"data_dir": str(tmp_path / "imgs"), "jsonl_path": path}
    group = dict(GROUP, num_used_data=[3])
    family = build(tokenizer, special_tokens, info, group).grouped_datasets[0]
    log = family.new_skip_log()
    samples = [s for _, s in family.iter_pass(log, 0, family.worker_shard())]
    assert len(samples) == 2
    assert [i["type"] for i in samples[0]["sequence_plan"]] == ["vit_image", "text"]
    assert log.as_dict() == {"parse_row_failed": 1}
    assert "docs.jsonl, line 3" in log.examples["parse_row_failed"]


def test_bad_segment_defaults_are_config_errors(tokenizer, special_tokens, parquet_info):
    with pytest.raises(ConfigError, match="text_loss"):
        build(tokenizer, special_tokens, parquet_info, dict(GROUP, segment_defaults={"text_loss": "some"}))
    with pytest.raises(ConfigError, match="later_images"):
        build(tokenizer, special_tokens, parquet_info, dict(GROUP, segment_defaults={"later_images": ["drawn"]}))


def test_without_a_vit_transform_only_vae_roles_are_allowed(tokenizer, special_tokens, parquet_info):
    group = {k: v for k, v in GROUP.items() if k != "vit_image_transform_args"}
    with pytest.raises(ConfigError, match="vit_image_transform_args"):
        build(tokenizer, special_tokens, parquet_info, group)
    vae_only = {"first_image": ["conditioned"], "later_images": ["generated"]}
    family = build(tokenizer, special_tokens, parquet_info, dict(group, segment_defaults=vae_only)).grouped_datasets[0]
    log = family.new_skip_log()
    plans = [s["sequence_plan"] for _, s in family.iter_pass(log, 0, family.worker_shard())]
    assert len(plans) == len(DOCS) - 1 and all(item["type"] != "vit_image" for plan in plans for item in plan)
    assert log.as_dict() == {"parse_row_failed": 1}  # "bravo" asks for an understood image
    assert "vit_image_transform_args" in log.examples["parse_row_failed"]


def test_a_video_path_without_frame_sampler_args_is_a_counted_skip(tmp_path, tokenizer):
    from bagel_data import ImageTransform
    from bagel_data.families.interleaved import InterleavedIterableDataset

    docs = [[text("a clip", supervised=True), {"type": "video", "path": "clip.mp4", "generated": True}]]
    docs.append([text("kilo is plain text", supervised=True)])
    write_interleaved(tmp_path / "docs" / "part-0.parquet", [docs])
    family = InterleavedIterableDataset(
        "il", ImageTransform(64, 32, 16), tokenizer, None, [str(tmp_path / "docs")], [1], num_workers=1,
        segment_defaults={"first_image": ["conditioned"], "later_images": ["conditioned"]},
    )  # fmt: skip
    log = family.new_skip_log()
    assert len(list(family.iter_pass(log))) == 1  # the run goes on past the video document
    assert log.as_dict() == {"video_decode_failed": 1}
    assert "il has no frame_sampler_args" in log.examples["video_decode_failed"]


def test_uint8_pixels_of_images_and_video_frames_normalize_to_the_float_packs(tokenizer, special_tokens, parquet_info):
    from bagel_data.media.pixels import normalize_pixels

    floats = list(itertools.islice(iter(build(tokenizer, special_tokens, parquet_info)), 6))
    dataset = build(tokenizer, special_tokens, parquet_info, pixel_format="uint8")
    for index, (raw, want) in enumerate(zip(itertools.islice(iter(dataset), 6), floats)):
        check_batch(raw, dataset.config, dataset.special_tokens)
        assert all(raw[key].dtype.itemsize == 1 for key in ("padded_images", "packed_vit_tokens") if key in raw)
        got = normalize_pixels(raw)
        assert got.keys() == want.keys(), index
        for key in ("padded_images", "packed_vit_tokens"):
            assert (key in got) == (key in want) and (key not in got or got[key].equal(want[key])), (index, key)
