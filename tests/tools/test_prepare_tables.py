"""`prepare t2i` on parquet tables (`tools/prepare/tables.py`, `t2i.table_t2i_row`): Hugging
Face `datasets` exports written by the real library, and pyarrow-written edge cases."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bagel_data.cli.tools import prepare_app
from bagel_data.errors import ConfigError
from bagel_data.tools.prepare import prepare_t2i
from bagel_data.tools.prepare.sharded import prepare_sharded
from bagel_data.tools.prepare.tables import parquet_files
from helpers.prepare_inputs import hf_t2i_parquet, image_bytes

needs_datasets = pytest.mark.skipif(
    importlib.util.find_spec("datasets") is None, reason="the dev extra's datasets writes these files"
)


def _written(out: Path) -> list[dict]:
    return [row for path in sorted(out.glob("part-*.parquet")) for row in pq.read_table(path).to_pylist()]


@needs_datasets
@pytest.mark.parametrize("prepare", ["sharded", "plain"])
def test_a_datasets_export_prepares_with_its_bytes_and_captions(tmp_path, prepare):
    hf = tmp_path / "hf"
    (hf / "data").mkdir(parents=True)
    hf_t2i_parquet(hf / "data" / "train-00000-of-00002.parquet", ["a red cat", "a blue dog", "  "])
    hf_t2i_parquet(hf / "data" / "train-00001-of-00002.parquet", ["a green frog"])
    out = tmp_path / "out"
    if prepare == "sharded":
        report = prepare_sharded("t2i", hf, out, rows_per_shard=2)
    else:
        report = prepare_t2i(hf, out, rows_per_shard=2)
    rows = _written(out)
    assert report.rows_written == len(rows) == 3
    assert [json.loads(row["captions"]) for row in rows] == [
        {"caption_1": "a red cat"}, {"caption_1": "a blue dog"}, {"caption_1": "a green frog"}
    ]  # fmt: skip
    assert rows[0]["image"] == image_bytes(0, "PNG") and rows[2]["image"] == image_bytes(0, "PNG")
    assert [(note.location, note.reason) for note in report.dropped] == [
        ("train-00000-of-00002.parquet:2", "no_caption")
    ]
    assert report.sources == {"column text": 3}


@needs_datasets
def test_a_single_parquet_file_is_a_table_not_a_manifest(tmp_path):
    table = hf_t2i_parquet(tmp_path / "one.parquet", ["a cat", "a dog"], caption_column="prompt")
    result = CliRunner().invoke(prepare_app, ["t2i", str(table), str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "malformed_row" not in result.output and "captions from column prompt" in result.output
    assert len(_written(tmp_path / "out")) == 2


@needs_datasets
def test_a_wrong_column_is_one_error_naming_the_columns_found(tmp_path):
    table = hf_t2i_parquet(tmp_path / "one.parquet", ["a cat"])
    result = CliRunner().invoke(prepare_app, ["t2i", str(table), str(tmp_path / "out"), "--caption-column", "alt"])
    assert result.exit_code == 2
    assert result.output.count("error") == 1
    assert (
        "--caption-column = 'alt'" in result.output  # the option's name, as the user typed it
        and "caption_column" not in result.output
        and "its columns: image (struct<bytes: binary, path: string>), text (string)" in result.output
    )
    assert not (tmp_path / "out").exists()  # refused before anything is written


@needs_datasets
def test_every_file_is_checked_before_any_row_is_read(tmp_path):
    hf_t2i_parquet(tmp_path / "a.parquet", ["a cat"])
    pq.write_table(pa.table({"image": [b"x"], "text": [3]}), tmp_path / "b.parquet")
    with pytest.raises(ConfigError, match=r"b\.parquet is int64"):
        prepare_sharded("t2i", tmp_path, tmp_path / "out")


def test_path_cells_under_the_root_and_list_captions(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "p.jpg").write_bytes(image_bytes(7))
    table = tmp_path / "t.parquet"
    cells = {
        "photo": ["", "imgs/p.jpg", "imgs/missing.jpg", "../outside.jpg"],
        "alt": [["one"], [" ", "two", "three"], ["z"], ["w"]],
    }
    pq.write_table(pa.table(cells), table)
    report = prepare_sharded("t2i", table, tmp_path / "out", image_column="photo", caption_column="alt")
    rows = _written(tmp_path / "out")
    assert [row["image"] for row in rows] == [image_bytes(7)]
    assert json.loads(rows[0]["captions"]) == {"caption_1": "two", "caption_2": "three"}
    assert [note.reason for note in report.dropped] == ["image_missing", "image_missing", "image_outside_image_root"]


def test_bagel_json_captions_in_a_string_column(tmp_path):
    table = tmp_path / "t.parquet"
    captions = ['{"caption_1": "x", "caption_2": "y"}', "plain text"]
    pq.write_table(pa.table({"image": [image_bytes(1), image_bytes(2)], "captions": captions}), table)
    prepare_sharded("t2i", table, tmp_path / "out")
    assert [json.loads(row["captions"]) for row in _written(tmp_path / "out")] == [
        {"caption_1": "x", "caption_2": "y"}, {"caption_1": "plain text"}
    ]  # fmt: skip


def test_an_img2dataset_folder_with_parquet_metadata_stays_a_folder(tmp_path):
    (tmp_path / "00000").mkdir()
    (tmp_path / "00000" / "000.jpg").write_bytes(image_bytes(1))
    pq.write_table(pa.table({"key": ["000"], "status": ["success"]}), tmp_path / "00000.parquet")
    assert parquet_files(tmp_path) == []
    assert parquet_files(tmp_path / "00000.parquet") == [tmp_path / "00000.parquet"]


@needs_datasets
@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("edit", r"no \(source, instruction, target\) columns"),
        ("interleaved", "a parquet file is a table, not a manifest"),
    ],
)
def test_a_parquet_file_is_never_read_as_a_jsonl_manifest(tmp_path, command, message):
    table = hf_t2i_parquet(tmp_path / "one.parquet", ["a cat"])
    with pytest.raises(ConfigError, match=message):
        prepare_sharded(command, table, tmp_path / "out")
