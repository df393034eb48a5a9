"""`prepare edit` on (source, instruction, target) triples (`tools/prepare/edit.py`): JSONL,
CSV and parquet written by the `datasets` library, columns named or found, and one message
showing the expected shape for a row of another shape."""

from __future__ import annotations

import csv
import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bagel_data.cli.tools import prepare_app
from bagel_data.errors import ConfigError
from bagel_data.tools.prepare import prepare_edit
from bagel_data.tools.prepare.edit import EXPECTED_SHAPE, TripleColumns
from bagel_data.tools.prepare.sharded import prepare_sharded
from helpers.prepare_inputs import hf_edit_parquet, image_bytes


def _rows(out) -> list[dict]:
    return [row for path in sorted(out.glob("part-*.parquet")) for row in pq.read_table(path).to_pylist()]


@pytest.fixture()
def images(tmp_path):
    for name, seed in (("a.png", 1), ("b.png", 2), ("c.png", 3)):
        (tmp_path / name).write_bytes(image_bytes(seed, "PNG"))
    return tmp_path


def test_jsonl_triples_and_chains_side_by_side(images, tmp_path):
    lines = [
        {"source": "a.png", "instruction": "make it blue", "target": "b.png"},
        {"images": ["a.png", "b.png", "c.png"], "instructions": [["first"], ["second"]]},
        {"source": "b.png", "instruction": ["add a hat", "put a hat on it"], "target": "c.png"},
    ]
    manifest = tmp_path / "edits.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = prepare_sharded("edit", manifest, tmp_path / "out")
    rows = _rows(tmp_path / "out")
    assert report.rows_written == 3 and not report.dropped
    assert rows[0] == {
        "image_list": [image_bytes(1, "PNG"), image_bytes(2, "PNG")],
        "instruction_list": [["make it blue"]],
    }
    assert rows[1]["instruction_list"] == [["first"], ["second"]] and len(rows[1]["image_list"]) == 3
    assert rows[2]["instruction_list"] == [["add a hat", "put a hat on it"]]
    assert rows[2]["image_list"] == [image_bytes(2, "PNG"), image_bytes(3, "PNG")]  # source first, then target


def test_csv_triples_with_named_columns(images, tmp_path):
    manifest = tmp_path / "edits.csv"
    with manifest.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["before", "how", "after", "source"])  # a `source` column that is not the image
        writer.writerow(["c.png", "shrink it", "a.png", "flickr"])
    columns = TripleColumns(source="before", instruction="how", target="after")
    prepare_edit(manifest, tmp_path / "out", columns=columns)
    assert _rows(tmp_path / "out") == [
        {"image_list": [image_bytes(3, "PNG"), image_bytes(1, "PNG")], "instruction_list": [["shrink it"]]}
    ]


def test_a_datasets_export_through_the_command(tmp_path):
    pytest.importorskip("datasets")
    table = hf_edit_parquet(tmp_path / "train.parquet", ["make it night", "remove the car"])
    out = tmp_path / "out"
    result = CliRunner().invoke(prepare_app, ["edit", str(table), str(out)])
    assert result.exit_code == 0, result.output
    rows = _rows(out)
    assert [row["instruction_list"] for row in rows] == [[["make it night"]], [["remove the car"]]]
    assert rows[1]["image_list"] == [image_bytes(1, "PNG"), image_bytes(101, "PNG")]
    info = json.loads((out / "parquet_info.json").read_text())
    assert list(info.values()) == [{"num_row_groups": 1, "num_rows": 2}]


def test_a_table_without_triple_columns_is_one_error_naming_its_columns(tmp_path):
    pytest.importorskip("datasets")
    table = hf_edit_parquet(tmp_path / "train.parquet", ["x"])
    with pytest.raises(ConfigError) as caught:
        prepare_sharded("edit", table, tmp_path / "out", columns=TripleColumns(instruction="caption"))
    message = str(caught.value)
    assert "its columns: input_image (struct<bytes: binary, path: string>), edit_prompt (string)" in message
    assert EXPECTED_SHAPE in message and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "row",
    [
        {"images": "a.png b.png", "instructions": [["x"]]},  # the user's complaint: no shape shown
        {"before": "a.png", "after": "b.png", "prompt": "x"},
        ["a.png", "x", "b.png"],
        {"source": "a.png", "instruction": 3, "target": "b.png"},
    ],
)
def test_a_row_of_another_shape_gets_one_message_with_the_expected_shape(images, tmp_path, row):
    manifest = tmp_path / "edits.jsonl"
    good = {"source": "a.png", "instruction": "x", "target": "b.png"}
    manifest.write_text(json.dumps(row) + "\n" + json.dumps(good) + "\n")
    report = prepare_sharded("edit", manifest, tmp_path / "out")
    assert report.rows_written == 1
    [note] = report.dropped
    assert note.location == "edits.jsonl:1" and note.reason == "malformed_row"
    assert EXPECTED_SHAPE in note.detail


def test_triple_images_must_exist_under_the_root(images, tmp_path):
    manifest = tmp_path / "edits.jsonl"
    lines = [{"source": "a.png", "instruction": "x", "target": "gone.png"},
             {"source": "../a.png", "instruction": "x", "target": "b.png"}]  # fmt: skip
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = prepare_sharded("edit", manifest, tmp_path / "out")
    assert [note.reason for note in report.dropped] == ["image_missing", "image_outside_image_root"]
