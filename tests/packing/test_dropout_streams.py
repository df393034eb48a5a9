"""CFG dropout draws from a generator of its own (keyed by the row and its own stream tag),
apart from the family's per-row generator that chooses the caption (and a video's frames):
turning dropout on does not change which caption a row gets, and a row's dropout decision
is not its caption choice's first draw."""

from __future__ import annotations

import itertools

import pytest

from bagel_data import ImageTransform, T2IIterableDataset
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.groups import FamilyGroup
from helpers.builders import solid_jpeg, write_t2i
from helpers.fake_groups import one_group_packed

CAPTIONS = {f"caption_{k}": "word " * (2 + 3 * k) for k in range(6)}  # each a length of its own


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("captions")
    rows = [{"image": solid_jpeg(48, 32, (10 * i, 80, 160)), "captions": CAPTIONS} for i in range(6)]
    write_t2i(root, [[rows[:3], rows[3:]], [rows[:4]]])
    return root


def _family(folder, tokenizer):
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(folder)], [2], num_workers=1)
    family.set_epoch(11)
    return family


def _lengths(folder, tokenizer, special_tokens, text_dropout: float) -> dict:
    """Each packed row's packed length, by row."""
    config = PackingConfig(
        expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70,
        text_cond_dropout_prob=text_dropout, vit_cond_dropout_prob=0.0, vae_cond_dropout_prob=0.0,
    )  # fmt: skip
    packed = one_group_packed("t2i", _family(folder, tokenizer), config, special_tokens)
    lengths = {}
    for batch in itertools.islice(iter(packed), 12):
        for where, length in zip(batch["batch_data_indexes"], batch["sample_lens"]):
            lengths.setdefault(tuple(where["data_indexes"]), length)
    return lengths


def test_the_dropout_generator_is_not_the_caption_generator(folder, tokenizer):
    family = _family(folder, tokenizer)
    group = FamilyGroup(0, "t2i", family)
    firsts = []
    for cursor, sample in itertools.islice(family.iter_samples(), 10):
        row_key = sample["row_key"]
        caption_draw = family.sample_rng(*row_key).random(3).tolist()
        dropout_draw = group.dropout_rng(11, cursor, row_key).random(3).tolist()
        assert caption_draw != dropout_draw, row_key
        assert group.dropout_rng(11, cursor, row_key).random(3).tolist() == dropout_draw  # its own, each time
        firsts.append(dropout_draw[0])
    assert len(set(firsts)) == len(firsts)  # one per row


def test_turning_dropout_on_keeps_each_rows_caption(folder, tokenizer, special_tokens):
    """With text dropout on, a row packs with the caption it gets with dropout off, or with
    none: never with another one (each caption has a length of its own)."""
    off = _lengths(folder, tokenizer, special_tokens, 0.0)
    on = _lengths(folder, tokenizer, special_tokens, 0.5)
    image_only = min(on.values())
    common = set(off) & set(on)
    assert len(common) >= 6
    assert all(on[row] in (off[row], image_only) for row in common), (off, on)
    assert sum(on[row] == image_only for row in common) >= 1, "dropout dropped a caption: the test tests it"
    assert sum(on[row] == off[row] for row in common) >= 1
    assert len({off[row] for row in common}) >= 2, "rows got different captions: a swap would show"
