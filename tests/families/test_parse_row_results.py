"""A `parse_row` result is checked against the sample schema before it reaches the packer.

Each hostile result (issue 27: unknown item type, non-int / negative / huge ids, a ViT
tensor off the patch grid, a 0x0 VAE target, an understated num_tokens, lists that disagree,
an empty plan, an absurd frame delta) is a counted `row_sample_invalid` skip naming file,
row group and row, or `BadSampleError` in strict mode; a bad image through `add_image` is an
`image_decode_failed` skip with its location. The good rows around them still pack.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from bagel_data import (
    DATASET_REGISTRY,
    InterleavedBaseIterableDataset,
    ParquetStandardIterableDataset,
    make_bagel_multimodal_dataset,
)
from bagel_data.errors import BadSampleError, EmptyWorkerError, RowDropped, SkipReason
from bagel_data.families.unit_plan import UnitPlan
from bagel_data.packing.invariants import check_batch
from helpers.builders import png_bytes, write_parquet

GOOD_IMAGE = png_bytes(40, 40, (200, 10, 10))


def _text(ids, **flags):
    return {"type": "text", "enable_cfg": 0, "loss": 1, "special_token_loss": 0, "special_token_label": None, **flags}


def _vae(**flags):
    return {
        "type": "vae_image",
        "enable_cfg": 0,
        "loss": 0,
        "special_token_loss": 0,
        "special_token_label": None,
        **flags,
    }


def _data(plan, texts, images, num_tokens):
    return {"sequence_plan": plan, "text_ids_list": texts, "image_tensor_list": images, "num_tokens": num_tokens}


HOSTILE = {
    "unknown_type": _data([{**_text([1]), "type": "audio"}], [], [torch.zeros(3, 16, 16)], 1),
    "non_int_ids": _data([_text(None)], [["a", "b"]], [], 2),
    "float_ids": _data([_text(None)], [[1.5]], [], 1),
    "negative_id": _data([_text(None)], [[-5, 3]], [], 2),
    "huge_id": _data([_text(None)], [[10**12]], [], 1),
    "vit_off_grid": _data([{**_vae(), "type": "vit_image"}, _text(None)], [[1]], [torch.zeros(3, 15, 14)], 2),
    "vae_zero": _data([_vae(), _text(None)], [[1]], [torch.zeros(3, 0, 0)], 1),
    "vae_two_channels": _data([_vae(), _text(None)], [[1]], [torch.zeros(2, 16, 16)], 2),
    "understated": _data([_text(None)], [list(range(1, 200))], [], 3),
    "lists_disagree": _data([_text(None), _text(None)], [[1]], [], 1),
    "empty_plan": _data([], [], [], 0),
    "bad_loss_flag": _data([_text(None, loss=7)], [[1]], [], 1),
    "frame_delta_huge": _data(
        [_vae(split_start=True, split_end=False, frame_delta=4_600_000_000_000_000_000), _vae(split_start=False)],
        [],
        [torch.zeros(3, 16, 16)] * 2,
        2,
    ),
    "frame_delta_negative": _data(
        [_vae(split_start=True, split_end=False, frame_delta=-3), _vae(split_start=False)],
        [],
        [torch.zeros(3, 16, 16)] * 2,
        2,
    ),
    "not_a_dict": ["sequence_plan"],
}
CASES = list(HOSTILE)


class HostileFamily(InterleavedBaseIterableDataset, ParquetStandardIterableDataset):
    """Row `case` of the table: a good caption, or the hostile result it names."""

    def parse_row(self, row):
        if row["case"] == "good":
            return self.add_text(self.init_data(), f"caption {row.name}", need_loss=True)
        if row["case"] == "bad_image":
            return self.add_image(self.init_data(), b"\x89PNG\r\n\x1a\n broken", False, True, False)
        if row["case"] == "video_indexes":
            return self.add_video(self.init_data(), [GOOD_IMAGE] * 2, [5, -1], True, False)
        if row["case"] == "own_skip":  # the one "skip this row" exception, raised by user code
            raise RowDropped(SkipReason.IMAGE_MISSING, "the row's image is not in the bucket")
        return HOSTILE[row["case"]]


GROUP = {
    "dataset_names": ["rows"],
    "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32},
    "vit_image_transform_args": {"image_stride": 14, "max_image_size": 56, "min_image_size": 28},
    "num_used_data": [1],
    "weight": 1,
}
PACKING = dict(expected_num_tokens=100, max_num_tokens=200, max_num_tokens_per_sample=150, prefer_buffer_before=50)


def _rows(folder, cases):
    folder.mkdir(parents=True, exist_ok=True)
    write_parquet(folder / "part-0.parquet", [[{"case": case} for case in cases]], {})


def _build(tokenizer, special_tokens, tmp_path, monkeypatch, cases, name="hostile", group=GROUP, **packing):
    _rows(tmp_path / "data", cases)
    monkeypatch.setitem(DATASET_REGISTRY, name, HostileFamily)
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets={name: group},
        dataset_info={name: {"rows": {"data_dir": str(tmp_path / "data")}}},
        num_workers=1,
        **dict(PACKING, **packing),
    )


@pytest.mark.parametrize("case", CASES)
def test_each_hostile_result_is_a_named_skip_with_its_row(tokenizer, special_tokens, tmp_path, monkeypatch, case):
    dataset = _build(tokenizer, special_tokens, tmp_path, monkeypatch, ["good", case, "good"])
    family = dataset.grouped_datasets[0]
    log = family.new_skip_log()
    samples = list(family.iter_pass(log))
    assert len(samples) == 2
    assert log.as_dict() == {"row_sample_invalid": 1}
    assert "part-0.parquet, row group 0, row 1" in log.examples["row_sample_invalid"]
    family.strict = True
    with pytest.raises(BadSampleError, match="row_sample_invalid at .*row group 0, row 1"):
        list(family.iter_pass(family.new_skip_log()))


def test_packs_around_hostile_rows_are_valid(tokenizer, special_tokens, tmp_path, monkeypatch):
    dataset = _build(tokenizer, special_tokens, tmp_path, monkeypatch, ["good", *CASES, "good"])
    for batch in itertools.islice(iter(dataset), 4):
        check_batch(batch, dataset.config, dataset.special_tokens)
        assert 0 not in batch["sample_lens"]


def test_bad_image_through_add_image_is_a_located_skip(tokenizer, special_tokens, tmp_path, monkeypatch):
    dataset = _build(tokenizer, special_tokens, tmp_path, monkeypatch, ["good", "bad_image", "video_indexes"])
    family = dataset.grouped_datasets[0]
    log = family.new_skip_log()
    assert len(list(family.iter_pass(log))) == 1
    assert log.as_dict() == {"image_decode_failed": 1, "row_sample_invalid": 1}
    assert "row group 0, row 1" in log.examples["image_decode_failed"]
    assert "frame_indexes" in log.examples["row_sample_invalid"]
    family.strict = True
    with pytest.raises(BadSampleError, match="image_decode_failed at .*row group 0, row 1"):
        list(family.iter_pass(family.new_skip_log()))


def test_parse_row_may_skip_a_row_under_a_named_reason(tokenizer, special_tokens, tmp_path, monkeypatch):
    dataset = _build(tokenizer, special_tokens, tmp_path, monkeypatch, ["good", "own_skip", "good"])
    family = dataset.grouped_datasets[0]
    log = family.new_skip_log()
    assert len(list(family.iter_pass(log))) == 2
    assert log.as_dict() == {"image_file_missing": 1}
    assert "row group 0, row 1" in log.examples["image_file_missing"]


def test_compat_bagel_runs_a_parse_row_family(tokenizer, special_tokens, tmp_path, monkeypatch):
    # The row's own random.Random was seeded from a draw over range(2**63): OverflowError.
    dataset = _build(tokenizer, special_tokens, tmp_path, monkeypatch, ["good"] * 6, compat="bagel")
    batch = next(iter(dataset))
    assert batch["sample_lens"]


def test_all_cfg_samples_under_full_dropout_raise_instead_of_spinning(tokenizer, special_tokens, tmp_path, monkeypatch):
    class AllCfg(HostileFamily):
        def parse_row(self, row):
            return self.add_text(self.init_data(), f"caption {row.name}", need_loss=True, enable_cfg=True)

    monkeypatch.setitem(DATASET_REGISTRY, "cfg", AllCfg)
    _rows(tmp_path / "cfg", ["good"] * 4)
    dataset = make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets={"cfg": GROUP},
        dataset_info={"cfg": {"rows": {"data_dir": str(tmp_path / "cfg")}}},
        num_workers=1,
        text_cond_dropout_prob=1.0,
        **PACKING,
    )
    with pytest.raises(EmptyWorkerError, match="lost every item to CFG dropout"):
        next(iter(dataset))


@pytest.mark.parametrize("strategy", ["greedy", "best_fit"])
def test_samples_that_dropout_empties_are_counted_not_packed(
    tokenizer, special_tokens, tmp_path, monkeypatch, strategy
):
    class HalfCfg(HostileFamily):
        def parse_row(self, row):  # odd rows are all-CFG: with dropout 1.0 they add nothing
            return self.add_text(self.init_data(), f"caption {row.name}", need_loss=True, enable_cfg=row.name % 2 == 1)

    monkeypatch.setitem(DATASET_REGISTRY, "half", HalfCfg)
    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)  # data_indexes end with the row: the walk by units
    _rows(tmp_path / "half", ["good"] * 8)
    dataset = make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets={"half": GROUP},
        dataset_info={"half": {"rows": {"data_dir": str(tmp_path / "half")}}},
        num_workers=1,
        text_cond_dropout_prob=1.0,
        pack_strategy=strategy,
        **PACKING,
    )
    stream = iter(dataset)
    for batch in itertools.islice(stream, 3):
        check_batch(batch, dataset.config, dataset.special_tokens)
        assert 0 not in batch["sample_lens"]
        assert all(where["data_indexes"][-1] % 2 == 0 for where in batch["batch_data_indexes"])
    assert dataset._live.logs[0].counts["every_item_dropped_by_cfg"] > 0
