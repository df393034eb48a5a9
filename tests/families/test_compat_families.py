"""compat="bagel" in the families: edit draws in the reference's order (expected choices
computed here from a hand-seeded `random.Random`), and `<video>` in the first turn only."""

from __future__ import annotations

import itertools
import random

from bagel_data.compat import CompatPolicy
from bagel_data.errors import SkipReason
from bagel_data.families.edit import UnifiedEditIterableDataset
from bagel_data.families.vlm import SftJSONLIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.media.video import FrameSampler
from helpers.builders import png_bytes, write_edit, write_vlm

VAE = ImageTransform(32, 16, 16)
VIT = ImageTransform(28, 14, 14)
GREYS = [30, 80, 130, 180, 230]
IMAGES = [png_bytes(32, 32, (g, g, g)) for g in GREYS]


def _reference_edit_texts(rng: random.Random, instructions: list[list[str]]) -> list[str]:
    """The texts the reference's parse_row makes, drawing as it does (the start image
    decodes between the span draws and the coin; no draw there)."""
    n = len(instructions) + 1
    start = rng.choice(range(n - 1))
    end = rng.choice(range(start + 1, min(start + 3, n)))
    if end - start > 1 and rng.random() < 0.5:
        if end == n - 1:
            end -= 1
        return ["".join(rng.choice(instructions[i - 1]) + ". " for i in range(start + 1, end + 1)).rstrip()]
    return [rng.choice(instructions[i - 1]) for i in range(start + 1, end + 1)]


def test_edit_draws_follow_the_reference(tmp_path, tokenizer):
    phrasings = [[f"s{s}p{p}" for p in range(3)] for s in range(1, 5)]
    row = {"image_list": IMAGES, "instruction_list": phrasings}
    _, info = write_edit(tmp_path, [[[row] * 6]])
    # The policy an entrance hands down: compat mode, its streams seeded with 5.
    policy = CompatPolicy("bagel", seed=5)
    dataset = UnifiedEditIterableDataset(
        "edit", VAE, tokenizer, VIT, [str(tmp_path)], [1], info, num_workers=1, compat=policy
    )
    samples = list(itertools.islice(iter(dataset), 6))
    rng = random.Random(5)
    for sample in samples:
        texts = [tokenizer.decode(ids) for ids in sample["text_ids_list"]]
        assert texts == _reference_edit_texts(rng, phrasings)
    assert len({tuple(map(tuple, s["text_ids_list"])) for s in samples}) > 1, "the draws should vary"


def test_edit_row_missing_an_instruction_list_spends_its_draws(tmp_path, tokenizer):
    short = {"image_list": IMAGES[:3], "instruction_list": [["only"]]}  # step 2 has no list
    _, info = write_edit(tmp_path, [[[short] * 4]])
    dataset = UnifiedEditIterableDataset(
        "edit", VAE, tokenizer, VIT, [str(tmp_path)], [1], info, num_workers=1, compat="bagel"
    )
    log = dataset.new_skip_log()
    samples = [s for _, s in itertools.islice(dataset.iter_samples(log=log), 8)]
    assert samples and log.counts[SkipReason.EDIT_LISTS_DISAGREE.value] >= 1
    for sample in samples:  # only rows whose span stays on step 1 give samples (merged: "only.")
        assert [tokenizer.decode(ids) for ids in sample["text_ids_list"]] in (["only"], ["only."])


def _video_dataset(tmp_path, tokenizer, rows, compat):
    frames = {f"clip/frame_{i}.png": png_bytes(28, 28, (40 * i, 0, 0)) for i in range(1, 4)}
    jsonl, image_dir = write_vlm(tmp_path, rows, frames)
    sampler = FrameSampler(max_num_frames=3, min_num_frames=2)
    return SftJSONLIterableDataset(
        "vlm", ImageTransform(28, 14, 14), tokenizer, sampler, [jsonl], [image_dir], [10], num_workers=1, compat=compat
    )


def test_video_tag_only_in_the_first_turn(tmp_path, tokenizer):
    late = {
        "video": "clip/",
        "conversations": [
            {"from": "human", "value": "Hi."},
            {"from": "gpt", "value": "Hello."},
            {"from": "human", "value": "<video> What moves?"},
            {"from": "gpt", "value": "Shapes."},
        ],
    }
    compat = _video_dataset(tmp_path / "c", tokenizer, [late, late], "bagel")
    log = compat.new_skip_log()
    try:
        next(compat.iter_samples(log=log))
    except Exception as exc:  # every row is skipped: the consecutive-failure bound trips
        assert "video_tag_missing" in str(exc)
    assert log.counts[SkipReason.VIDEO_TAG_MISSING.value] >= 2
    default = _video_dataset(tmp_path / "d", tokenizer, [late, late], None)
    _, sample = next(default.iter_samples())
    assert sum(item["type"] == "vit_image" for item in sample["sequence_plan"]) >= 2
