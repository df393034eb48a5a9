"""The T2I family reading a user's table in place (`image_column` / `caption_column`,
`sources/table_cells.py`): a Hugging Face `datasets` export gives the very samples its
`prepare t2i` copy gives."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from bagel_data.errors import ConfigError, TooManyFailuresError
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


def _path_table(folder, names: list[str]) -> None:
    """A table whose image cells name files under `folder/../photos` instead of holding them."""
    folder.mkdir(parents=True, exist_ok=True)
    photos = folder.parent / "photos"
    photos.mkdir(exist_ok=True)
    for index in range(2):
        (photos / f"{index}.png").write_bytes(image_bytes(index + 1, "PNG"))
    (folder.parent / "secret.png").write_bytes(image_bytes(9, "PNG"))
    pq.write_table(
        pa.table({"image": names, "text": [f"caption {i}" for i in range(len(names))]}), folder / "t.parquet"
    )


def test_path_cells_are_read_under_the_image_root_as_prepare_reads_them(tmp_path, tokenizer):
    names = ["0.png", "gone.png", "../secret.png", "1.png", str(tmp_path / "secret.png")]
    _path_table(tmp_path / "table", names)
    photos = str(tmp_path / "photos")
    report = prepare_sharded("t2i", tmp_path / "table", tmp_path / "prepared", image_root=photos)
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path / "table")], [1], num_workers=1,
                                 image_column="image", caption_column="text", image_roots=[photos])  # fmt: skip
    ours, theirs = _first_pass(dataset), _first_pass(_dataset_of(tmp_path / "prepared", tokenizer))
    assert _texts(ours, tokenizer) == _texts(theirs, tokenizer) == ["caption 0", "caption 3"]
    for mine, copy in zip(ours, theirs):
        assert torch.equal(mine["image_tensor_list"][0], copy["image_tensor_list"][0])
    assert dict(dataset.skip_log.counts) == {"image_file_missing": 1, "path_outside_dataset_root": 2}
    assert sorted(note.reason for note in report.dropped) == ["image_missing", *["image_outside_image_root"] * 2]


def test_the_image_root_comes_from_dataset_info(tmp_path, tokenizer):
    from bagel_data.config import parse_group
    from helpers.builders import SMALL_VAE

    _path_table(tmp_path / "tables", ["0.png", "1.png"])
    group = {"dataset_names": ["hub"], "image_transform_args": SMALL_VAE, "num_used_data": [1], "weight": 1,
             "image_column": "image", "caption_column": "text"}  # fmt: skip
    entry = {"data_dir": str(tmp_path / "tables"), "image_root": str(tmp_path / "photos")}
    spec = parse_group("t2i_pretrain", group, {"t2i_pretrain": {"hub": entry}}, None)
    dataset = spec.family("hub", tokenizer=tokenizer, num_workers=1, **spec.kwargs)
    assert _texts(_first_pass(dataset), tokenizer) == ["caption 0", "caption 1"]
    del entry["image_root"]  # the default root: the data_dir, which lacks them
    spec = parse_group("t2i_pretrain", group, {"t2i_pretrain": {"hub": entry}}, None)
    dataset = spec.family("hub", tokenizer=tokenizer, num_workers=1, **spec.kwargs)
    with pytest.raises(TooManyFailuresError, match=r"image_file_missing.*tables/0\.png does not exist \(image_root"):
        next(dataset.iter_samples())


def _dataset_of(folder, tokenizer) -> T2IIterableDataset:
    return T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(folder)], [1], num_workers=1)


def test_a_table_whose_image_root_is_remote_reads_ahead(tmp_path, tokenizer):
    """Its parquet lies on local disk while each path cell's image is fetched from the store."""
    _path_table(tmp_path / "table", ["0.png"])
    local = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path / "table")], [1], num_workers=1,
                               image_column="image", caption_column="text", image_roots=[str(tmp_path)])  # fmt: skip
    remote = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path / "table")], [1], num_workers=1,
                                image_column="image", caption_column="text", image_roots=["s3://bucket/photos"])  # fmt: skip
    assert (local.reads_remote(), remote.reads_remote()) == (False, True)
    from helpers.builders import png_bytes, write_t2i

    write_t2i(tmp_path / "shards", [[[{"image": png_bytes(16, 16), "captions": {"caption_1": "a"}}]]])
    assert not _dataset_of(tmp_path / "shards", tokenizer).media_folders()  # BAGEL's shards: images inside
