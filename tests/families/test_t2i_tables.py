"""The T2I family reading a user's table in place (`image_column` / `caption_column`,
`sources/table_cells.py`): a Hugging Face `datasets` export gives the very samples its
`prepare t2i` copy gives."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from bagel_data.errors import ConfigError
from bagel_data.families.registry import allowed_group_keys
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.tools.prepare.sharded import prepare_sharded
from helpers.prepare_inputs import hf_t2i_parquet, image_bytes

TRANSFORM = ImageTransform(32, 16, 16)
CAPTIONS = ["a red cat", "a blue dog", "a green frog", "a grey owl"]


def _first_pass(dataset) -> list[dict]:
    samples = []
    for cursor, sample in dataset.iter_samples():
        if cursor[0] > 0:
            return samples
        samples.append(sample)
    raise AssertionError("unreachable")


def _texts(samples, tokenizer) -> list[str]:
    return [tokenizer.decode(sample["text_ids_list"][0]) for sample in samples]


def test_a_datasets_export_in_place_gives_the_samples_of_its_prepared_copy(tmp_path, tokenizer):
    pytest.importorskip("datasets")
    (tmp_path / "hf").mkdir()
    hf_t2i_parquet(tmp_path / "hf" / "train.parquet", CAPTIONS)
    prepare_sharded("t2i", tmp_path / "hf", tmp_path / "prepared")
    in_place = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path / "hf")], [1], num_workers=1,
                                  image_column="image", caption_column="text")  # fmt: skip
    prepared = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path / "prepared")], [1], num_workers=1)
    ours, theirs = _first_pass(in_place), _first_pass(prepared)
    assert _texts(ours, tokenizer) == _texts(theirs, tokenizer) == CAPTIONS
    for mine, copy in zip(ours, theirs):
        assert torch.equal(mine["image_tensor_list"][0], copy["image_tensor_list"][0])


def test_a_wrong_column_is_named_at_construction(tmp_path, tokenizer):
    pytest.importorskip("datasets")
    hf_t2i_parquet(tmp_path / "train.parquet", CAPTIONS[:1])
    with pytest.raises(ConfigError) as caught:
        T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1], caption_column="caption")
    assert "its columns: image (struct<bytes: binary, path: string>), text (string)" in str(caught.value)


def test_list_captions_and_bad_cells_are_skipped_by_name(tmp_path, tokenizer):
    cells = {"jpg": [image_bytes(1, "PNG"), b"", image_bytes(2, "PNG")], "txt": [["one", "two"], ["x"], [" "]]}
    pq.write_table(pa.table(cells), tmp_path / "t.parquet")
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1], num_workers=1,
                                 image_column="jpg", caption_column="txt")  # fmt: skip
    samples = _first_pass(dataset)
    texts = _texts(samples, tokenizer)
    assert len(samples) == 2 and texts[0] in ("one", "two") and texts[1] == " "  # no caption: unconditional
    assert dict(dataset.skip_log.counts) == {"row_schema_invalid": 1}


def test_the_group_keys_are_declared():
    assert {"image_column", "caption_column"} <= allowed_group_keys(T2IIterableDataset)


def test_a_run_config_names_the_columns_and_validate_walks_them(tmp_path, tokenizer):
    pytest.importorskip("datasets")
    from bagel_data.tools.run import RunConfig
    from bagel_data.tools.validate import validate_config
    from helpers.builders import SMALL_VAE

    hf_t2i_parquet(tmp_path / "train.parquet", CAPTIONS)
    group = {"dataset_names": ["hub"], "image_transform_args": SMALL_VAE, "num_used_data": [1], "weight": 1,
             "caption_column": "text"}  # fmt: skip
    info = {"t2i_pretrain": {"hub": {"data_dir": str(tmp_path), "num_files": 1}}}
    budgets = {"expected_num_tokens": 4096, "max_num_tokens": 8192, "max_num_tokens_per_sample": 4096}
    report = validate_config(RunConfig({"t2i_pretrain": group}, info, budgets), num_workers=1, tokenizer=tokenizer)
    assert report.groups["t2i_pretrain"].samples == len(CAPTIONS), report.errors
    group["caption_column"] = "prompt"
    report = validate_config(RunConfig({"t2i_pretrain": group}, info, budgets), num_workers=1, tokenizer=tokenizer)
    assert not report.ok and "caption_column" in report.errors[0] and "text (string)" in report.errors[0]
