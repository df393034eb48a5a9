"""`bagel_data.tools.inspect.packs`: position kinds, attention pictures and the text rendering."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
import yaml
from PIL import Image
from typer.testing import CliRunner

from bagel_data import add_special_tokens, make_bagel_multimodal_dataset
from bagel_data.cli.tools import inspect_command
from bagel_data.packing.config import PackingConfig, SpecialTokens
from bagel_data.packing.layout import attention_allowed, get_flattened_position_ids_extrapolate
from bagel_data.packing.pack import PackBuilder
from bagel_data.sample import SampleBuilder
from bagel_data.tools.inspect.packs import (
    KIND_STYLE,
    PositionKind,
    attention_fraction,
    draw_histograms,
    draw_strip,
    inspect_packs,
    position_kinds,
    render_pack_text,
    sample_spans,
)
from bagel_data.tools.inspect.plots import strip_labels
from bagel_data.tools.run import load_run_config

# Small budgets keep packing quick; the demo's largest edit samples are skipped as too long.
PACKING = {"expected_num_tokens": 3584, "max_num_tokens": 4096, "max_num_tokens_per_sample": 2048,
           "prefer_buffer_before": 2048, "max_buffer_size": 20}  # fmt: skip


def _run_config(root: Path, use_flex: bool) -> Path:
    path = root / f"run_flex_{use_flex}.yaml"
    packing = {**PACKING, "use_flex": use_flex}
    path.write_text(yaml.safe_dump({"grouped_datasets": "grouped_datasets.yaml",
                                    "dataset_info": "dataset_info.yaml", "packing": packing}))  # fmt: skip
    return path


@pytest.fixture(scope="module")
def demo(demo_root, tmp_path_factory) -> Path:
    """A folder for this module's run configs beside copies of the demo's group and info
    files; the data is the session's demo dataset (named by absolute path), written once."""
    folder = tmp_path_factory.mktemp("demo")
    for name in ("grouped_datasets.yaml", "dataset_info.yaml"):
        shutil.copy2(demo_root / name, folder / name)
    return folder


def _demo_batches(run_config: Path, tokenizer, count: int = 2) -> list[dict]:
    config = load_run_config(str(run_config))
    tok, special, _ = add_special_tokens(tokenizer)
    dataset = make_bagel_multimodal_dataset(tok, special, config.grouped_datasets, num_workers=1,
                                            dataset_info=config.dataset_info, **config.packing)  # fmt: skip
    return list(itertools.islice(iter(dataset), count))


@pytest.fixture(scope="module")
def flex_batches(demo, tokenizer) -> list[dict]:
    return _demo_batches(_run_config(demo, True), tokenizer)


@pytest.fixture(scope="module")
def dense_batches(demo, tokenizer) -> list[dict]:
    return _demo_batches(_run_config(demo, False), tokenizer)


def _check_kind_counts(batch: dict, special: dict) -> None:
    kinds = position_kinds(batch, special)
    count = {kind: int(np.sum(kinds == kind)) for kind in PositionKind}
    ids = batch["packed_text_ids"].numpy()
    is_special = np.isin(ids, list(special.values()))
    ce = batch.get("ce_loss_indexes", torch.zeros(0, dtype=torch.int64)).numpy()
    special_positions = set(batch["packed_text_indexes"].numpy()[is_special].tolist())
    special_with_loss = sum(int(p) in special_positions for p in ce)
    mse = len(batch.get("mse_loss_indexes", []))
    assert kinds.dtype == np.int8 and len(kinds) == batch["sequence_length"]
    assert np.all(kinds >= 0), "every position has a kind"
    assert count[PositionKind.VAE_LOSS] == mse
    assert count[PositionKind.VAE] == len(batch.get("packed_vae_token_indexes", [])) - mse
    assert count[PositionKind.VIT] == len(batch.get("packed_vit_token_indexes", []))
    assert count[PositionKind.SPECIAL] == int(is_special.sum())
    assert count[PositionKind.TEXT_LOSS] == len(ce) - special_with_loss
    assert count[PositionKind.TEXT] == len(ids) - int(is_special.sum()) - count[PositionKind.TEXT_LOSS]


def test_position_kinds_agree_with_the_batch_indexes(flex_batches, dense_batches, special_tokens):
    for batch in (*flex_batches, *dense_batches):
        _check_kind_counts(batch, special_tokens)


def test_attention_from_flex_splits_equals_the_dense_masks(flex_batches, dense_batches):
    flex, dense = flex_batches[0], dense_batches[0]
    assert flex["sequence_length"] == dense["sequence_length"]
    np.testing.assert_allclose(attention_fraction(flex), attention_fraction(dense))
    fraction = attention_fraction(flex)
    assert fraction.shape == (512, 512) and 0 < fraction.mean() < 1


def test_inspect_packs_writes_readable_pictures_and_text(demo, tmp_path):
    report = inspect_packs(_run_config(demo, True), tmp_path / "out", num_batches=2)
    assert report.num_packs == 2 and len(report.fill_ratios) == 2
    assert all(0 < fill <= 1 for fill in report.fill_ratios)
    for path in (*report.strip_paths, *report.attention_paths, report.histogram_path):
        assert path.name.endswith(".png") and path.stat().st_size > 0
        with Image.open(path) as image:
            assert image.format == "PNG" and image.width > 0 and image.height > 0
    assert [p.name for p in report.strip_paths] == ["pack_0_strip.png", "pack_1_strip.png"]
    assert report.text_path.read_text(encoding="utf-8") == report.text
    assert report.text.startswith("=== pack 0 ===") and "group t2i_pretrain" in report.text
    assert "latents, generated (loss)]" in report.text
    assert sum(len(values) for values in report.sample_lengths.values()) == report.text.count("  sample ")


# -- hand-built packs: exact expectations -----------------------------------------------------
def _hand_pack(tokenizer, special: dict, *, with_vae: bool, use_flex: bool) -> dict:
    config = PackingConfig(use_flex=use_flex, max_num_tokens=200, text_cond_dropout_prob=0.0,
                           vit_cond_dropout_prob=0.0, vae_cond_dropout_prob=0.0)  # fmt: skip
    rng = np.random.default_rng(0)
    pack = PackBuilder(config, SpecialTokens(**special), rng, get_flattened_position_ids_extrapolate)
    vlm = SampleBuilder()
    vlm.add_text(tokenizer.encode("What is in the picture?"), enable_cfg=False, loss=False)
    vlm.add_image("vit_image", torch.zeros(3, 28, 42), 14, enable_cfg=False, loss=False)
    vlm.add_text(tokenizer.encode("A red kite."), enable_cfg=False, loss=True)
    pack.add(vlm.build(3, 0, "vlm_sft"))
    if with_vae:
        t2i = SampleBuilder()
        t2i.add_text(tokenizer.encode("a kite"), enable_cfg=True, loss=False)
        t2i.add_image("vae_image", torch.zeros(3, 32, 48), 16, enable_cfg=False, loss=True)
        pack.add(t2i.build([0, 1, 2], 0, "t2i_pretrain"))
    return pack.to_batch()


def test_render_pack_text_lists_each_sample_and_piece(tokenizer, special_tokens):
    batch = _hand_pack(tokenizer, special_tokens, with_vae=True, use_flex=True)
    text = render_pack_text(batch, tokenizer, special_tokens)
    assert text.splitlines() == [
        f"pack: {batch['sequence_length']} tokens, 2 samples",
        f"  sample 0: group vlm_sft, position 3, worker 0, tokens 0..{batch['sample_lens'][0] - 1} "
        f"({batch['sample_lens'][0]})",
        "    text             'What is in the picture?'",
        "    [ViT image 2 x 3 patches, understood]",
        "    text, supervised 'A red kite.'",
        f"  sample 1: group t2i_pretrain, position [0, 1, 2], worker 0, tokens {batch['sample_lens'][0]}.."
        f"{batch['sequence_length'] - 1} ({batch['sample_lens'][1]})",
        "    text             'a kite'",
        "    [VAE image 2 x 3 latents, generated (loss)]",
    ]
    assert sample_spans(batch) == [(0, batch["sample_lens"][0]), (batch["sample_lens"][0], batch["sequence_length"])]


def test_render_pack_text_keeps_token_id_zero_inside_a_text(tokenizer, special_tokens):
    """Token id 0 is a real token ('!' in Qwen2's vocabulary), not the padding of a
    position with no text id: a text holding it is shown whole."""
    assert tokenizer.encode("Look!")[-1] == 0
    config = PackingConfig(max_num_tokens=200, text_cond_dropout_prob=0.0, vit_cond_dropout_prob=0.0,
                           vae_cond_dropout_prob=0.0)  # fmt: skip
    pack = PackBuilder(config, SpecialTokens(**special_tokens), np.random.default_rng(0),
                       get_flattened_position_ids_extrapolate)  # fmt: skip
    sample = SampleBuilder()
    sample.add_text(tokenizer.encode("Look!"), enable_cfg=False, loss=False)
    sample.add_image("vit_image", torch.zeros(3, 42, 42), 14, enable_cfg=False, loss=False)
    sample.add_text(tokenizer.encode("A kite! Up high."), enable_cfg=False, loss=True)
    pack.add(sample.build(0, 0, "vlm_sft"))
    lines = render_pack_text(pack.to_batch(), tokenizer, special_tokens).splitlines()
    assert lines[2:] == [
        "    text             'Look!'",
        "    [ViT image 3 x 3 patches, understood]",
        "    text, supervised 'A kite! Up high.'",
    ]


def test_attention_fraction_is_exact_when_not_downsampled(tokenizer, special_tokens):
    for use_flex in (True, False):
        batch = _hand_pack(tokenizer, special_tokens, with_vae=True, use_flex=use_flex)
        expected = np.zeros((batch["sequence_length"],) * 2)
        first = batch["sample_lens"][0]
        texts = ("What is in the picture?", "A red kite.", "a kite")
        question, answer, caption = (len(tokenizer.encode(text)) + 2 for text in texts)
        expected[:first, :first] = attention_allowed([question, 2 * 3 + 2, answer], ["causal", "full", "causal"])
        expected[first:, first:] = attention_allowed([caption, 2 * 3 + 2], ["causal", "noise"])
        np.testing.assert_array_equal(attention_fraction(batch), expected)


def _strip_row(path: Path) -> np.ndarray:
    """The pixel row through the middle of the strip: the row with the most coloured pixels."""
    pixels = np.asarray(Image.open(path).convert("RGB"))
    palette = np.array([_rgb(colour) for _, colour in KIND_STYLE.values()])
    coloured = (pixels[:, :, None, :] == palette[None, None]).all(axis=-1).any(axis=-1)
    return pixels[int(coloured.sum(axis=1).argmax())]


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def _has_colour(pixels: np.ndarray, kind: PositionKind) -> bool:
    return bool((pixels == _rgb(KIND_STYLE[kind][1])).all(axis=-1).any())


@pytest.mark.parametrize("with_vae", [True, False], ids=["with-vae", "no-vae"])
def test_strip_colours_follow_the_kinds(tokenizer, special_tokens, tmp_path, with_vae):
    batch = _hand_pack(tokenizer, special_tokens, with_vae=with_vae, use_flex=False)
    kinds = position_kinds(batch, special_tokens)
    path = draw_strip(tmp_path / "strip.png", kinds, sample_spans(batch), ["a", "b"], "test")
    image = np.asarray(Image.open(path).convert("RGB"))
    assert _has_colour(image, PositionKind.VAE_LOSS) == with_vae == (len(batch.get("mse_loss_indexes", [])) > 0)
    assert _has_colour(image, PositionKind.VIT)


def test_strip_pixel_shares_match_position_shares(flex_batches, special_tokens, tmp_path):
    batch = flex_batches[0]
    kinds = position_kinds(batch, special_tokens)
    path = draw_strip(tmp_path / "strip.png", kinds, sample_spans(batch), [], "demo pack")
    row = _strip_row(path)
    coloured = sum((row == _rgb(KIND_STYLE[kind][1])).all(axis=-1).sum() for kind in PositionKind)
    for kind in (PositionKind.VAE_LOSS, PositionKind.VIT, PositionKind.VAE):
        share_of_pixels = (row == _rgb(KIND_STYLE[kind][1])).all(axis=-1).sum() / coloured
        assert share_of_pixels == pytest.approx(np.mean(kinds == kind), abs=0.03)


def test_inspect_command_prints_the_first_pack_and_the_files(demo, tmp_path):
    app = typer.Typer()
    app.command("inspect")(inspect_command)
    app.command("unused")(lambda: None)  # two commands, so "inspect" is a subcommand as in cli/main.py
    result = CliRunner().invoke(
        app, ["inspect", str(_run_config(demo, False)), "--out", str(tmp_path / "o"), "--batches", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "=== pack 0 ===" in result.output and str(tmp_path / "o" / "pack_0_strip.png") in result.output
    assert (tmp_path / "o" / "histograms.png").is_file()


@pytest.mark.parametrize("use_flex", [True, False])
def test_a_zero_length_sample_in_a_batch_does_not_crash_inspect(tokenizer, special_tokens, use_flex, tmp_path):
    import copy

    import torch

    batch = _hand_pack(tokenizer, special_tokens, with_vae=True, use_flex=use_flex)
    expected = attention_fraction(batch)
    odd = copy.copy(batch)  # a batch from an older writer, with an empty sample between the two
    odd["sample_lens"] = [batch["sample_lens"][0], 0, batch["sample_lens"][1]]
    odd["batch_data_indexes"] = [batch["batch_data_indexes"][0], *batch["batch_data_indexes"]]
    if not use_flex:
        masks = batch["nested_attention_masks"]
        odd["nested_attention_masks"] = [masks[0], torch.zeros(0, 0), masks[1]]
    np.testing.assert_array_equal(attention_fraction(odd), expected)
    assert "3 samples" in render_pack_text(odd, tokenizer, special_tokens).splitlines()[0]


def test_a_collated_uint8_batch_is_inspected_as_its_float_pack(demo, tokenizer, special_tokens, flex_batches):
    """A loader's batch (collated, `pixel_format: uint8`) is read as the float pack it
    normalizes to, not refused for holding raw pixels."""
    from bagel_data.batch import collate_wrapper

    config = load_run_config(str(_run_config(demo, True)))
    tok, special, _ = add_special_tokens(tokenizer)
    dataset = make_bagel_multimodal_dataset(
        tok, special, config.grouped_datasets, num_workers=1, dataset_info=config.dataset_info,
        **{**config.packing, "pixel_format": "uint8"},
    )  # fmt: skip
    batch = collate_wrapper()([next(iter(dataset))])
    assert batch.padded_images.dtype == torch.uint8
    expected = flex_batches[0]
    assert render_pack_text(batch, tok, special_tokens) == render_pack_text(expected, tok, special_tokens)
    np.testing.assert_array_equal(position_kinds(batch, special_tokens), position_kinds(expected, special_tokens))


def test_only_samples_wider_than_the_label_share_get_their_group_named():
    spans = [(0, 4), (4, 9), (9, 100)]  # 4 %, 5 % and 91 % of a 100-position pack
    assert strip_labels(spans, ["at_share", "over_share", "wide"], 100) == [(6.5, "over_share"), (54.5, "wide")]
    assert strip_labels(spans, ["a", "b", "c"], 200) == [(54.5, "c")]


def test_the_fill_bars_are_drawn_on_a_zero_to_one_axis(tmp_path):
    """Half-full and nearly full packs show as bars of the fill colour; a fill axis that did
    not start at 0 would show none."""
    path = draw_histograms(tmp_path / "h.png", {"t2i": [10, 20, 30]}, [0.5, 0.9])
    pixels = np.asarray(Image.open(path).convert("RGB"))
    right = pixels[:, pixels.shape[1] // 2 :]
    bar_pixels = int((right == _rgb("#1f4e9c")).all(axis=-1).sum())
    assert bar_pixels > 0.05 * right.shape[0] * right.shape[1], bar_pixels
