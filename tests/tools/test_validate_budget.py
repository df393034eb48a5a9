"""`validate` draws the per-sample budget's line where the packer draws it, and warns about
CFG dropout in understanding-only groups only when it can drop something."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from bagel_data import make_bagel_multimodal_dataset
from bagel_data.errors import TooManyFailuresError
from bagel_data.tools.run import RunConfig
from bagel_data.tools.validate import cfg_warnings, validate_config
from helpers.builders import png_bytes, t2i_run_config


def _t2i_config(root, budget: int, mandatory: bool) -> RunConfig:
    """One T2I group of four rows alike (one caption, so one length), dropouts off."""
    row = {"image": png_bytes(48, 32, (10, 80, 160)), "captions": {"a": "a blue square on grey"}}
    packing = {"max_buffer_size": 2, "max_consecutive_failures": 8, "text_cond_dropout_prob": 0.0,
               "vit_cond_dropout_prob": 0.0, "vae_cond_dropout_prob": 0.0}  # fmt: skip
    return t2i_run_config(root, [[[row] * 4]], budget=budget, group={"is_mandatory": mandatory}, packing=packing)


def _sample_length(tmp_path, tokenizer) -> int:
    report = validate_config(_t2i_config(tmp_path / "probe", 4096, False), num_workers=1, tokenizer=tokenizer)
    lengths = report.groups["t2i_pretrain"].lengths
    assert lengths["min"] == lengths["max"], lengths
    return lengths["max"]


def _packs(config: RunConfig, tokenizer, special_tokens, count: int) -> list:
    dataset = make_bagel_multimodal_dataset(
        tokenizer, special_tokens, config.grouped_datasets, dataset_info=config.dataset_info,
        local_rank=0, world_size=1, num_workers=1, **config.packing,
    )  # fmt: skip
    return list(itertools.islice(iter(dataset), count))


def test_a_sample_exactly_at_the_budget_is_packed_and_validate_agrees(tmp_path, tokenizer, special_tokens):
    length = _sample_length(tmp_path, tokenizer)
    config = _t2i_config(tmp_path / "data", length, mandatory=False)
    report = validate_config(config, num_workers=1, tokenizer=tokenizer)
    assert report.ok and report.groups["t2i_pretrain"].over_budget == 0, report.errors
    packs = _packs(config, tokenizer, special_tokens, 2)
    assert [len(pack["sample_lens"]) for pack in packs] == [1, 1]


def test_a_mandatory_sample_at_the_budget_is_over_it_in_validate_and_in_the_run(tmp_path, tokenizer, special_tokens):
    length = _sample_length(tmp_path, tokenizer)
    config = _t2i_config(tmp_path / "data", length, mandatory=True)
    report = validate_config(config, num_workers=1, tokenizer=tokenizer)
    assert not report.ok and report.groups["t2i_pretrain"].over_budget == 4
    over = f"every sample is over max_num_tokens_per_sample={length} (a mandatory group must stay under it)"
    assert any(over in error for error in report.errors), report.errors
    with pytest.raises(TooManyFailuresError):
        _packs(config, tokenizer, special_tokens, 1)
    under = _t2i_config(tmp_path / "data_plus_one", length + 1, mandatory=True)
    assert validate_config(under, num_workers=1, tokenizer=tokenizer).ok


class _Family:
    """Yields the given sequence plans as samples, as `iter_pass` does."""

    def __init__(self, plans: list[list[dict]]):
        self.plans = plans

    def iter_pass(self, log):
        for index, plan in enumerate(self.plans):
            yield f"row {index}", {"sequence_plan": plan}


def _item(kind: str, loss: int, cfg: int) -> dict:
    return {"type": kind, "loss": loss, "enable_cfg": cfg}


def _rates(text: float = 0.1, vit: float = 0.4, vae: float = 0.1) -> SimpleNamespace:
    return SimpleNamespace(text_cond_dropout_prob=text, vit_cond_dropout_prob=vit, vae_cond_dropout_prob=vae)


VQA = [_item("vit_image", 0, 1), _item("text", 0, 0), _item("text", 1, 0)]


def test_cfg_on_before_an_answer_is_named_with_its_rate():
    warnings = cfg_warnings("vqa", _Family([VQA, VQA]), _rates(vit=0.4))
    assert len(warnings) == 1
    assert "2 vit_image" in warnings[0] and "vit_cond_dropout_prob=0.4" in warnings[0]
    assert "first 2 samples" in warnings[0]


def test_a_zero_dropout_rate_drops_nothing_so_no_warning():
    assert cfg_warnings("vqa", _Family([VQA]), _rates(vit=0.0)) == []


def test_only_items_up_to_the_last_supervised_text_count():
    after_the_answer = [_item("text", 0, 0), _item("text", 1, 0), _item("vit_image", 0, 1)]
    assert cfg_warnings("vqa", _Family([after_the_answer]), _rates()) == []
    no_supervision = [_item("text", 0, 0), _item("vit_image", 0, 1), _item("text", 0, 0)]
    assert cfg_warnings("vqa", _Family([no_supervision]), _rates()) == []


def test_a_group_that_generates_gets_no_warning():
    generates = [_item("text", 0, 1), _item("vae_image", 1, 0)]
    assert cfg_warnings("t2i", _Family([VQA, generates]), _rates()) == []


def test_only_the_first_samples_are_looked_at():
    plain = [_item("text", 0, 0), _item("text", 1, 0)]
    assert cfg_warnings("vqa", _Family([plain] * 3 + [VQA]), _rates(), samples=3) == []
    assert len(cfg_warnings("vqa", _Family([plain] * 3 + [VQA]), _rates(), samples=4)) == 1
