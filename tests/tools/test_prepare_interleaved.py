"""`prepare interleaved`: OBELICS-style JSONL in, shards + parquet_info + run.yaml out, and the
run config works as written with `run`, `validate` and `inspect`."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bagel_data.cli.main import app
from bagel_data.tools.prepare import prepare_interleaved
from helpers.builders import png_bytes

runner = CliRunner()
COLOURS = {"a.png": (250, 0, 0), "b.png": (0, 250, 0), "c.png": (0, 0, 250)}


def _docs(count: int) -> list[dict]:
    docs = []
    for i in range(count):
        first, second = sorted(COLOURS)[i % 3], sorted(COLOURS)[(i + 1) % 3]
        docs.append(
            {
                "texts": [f"document {i} opens", None, f"then {i} says more", None, f"and {i} ends"],
                "images": [None, first, None, second, None],
            }
        )
    return docs


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("obelics")
    (root / "imgs").mkdir()
    for name, colour in COLOURS.items():
        (root / "imgs" / name).write_bytes(png_bytes(48, 40, colour))
    good = _docs(6)
    bad = [
        {"texts": ["both set"], "images": ["a.png"]},
        {"texts": [None, "x"], "images": ["missing.png", None]},
        {"texts": ["short"], "images": [None, "a.png"]},
    ]
    lines = [json.dumps(doc) for doc in good[:3] + bad + good[3:]] + ["not json"]
    (root / "docs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = root / "out"
    report = prepare_interleaved(root / "docs.jsonl", out, image_root=root / "imgs", rows_per_group=2)
    return root, out, good, report


def test_round_trip_keeps_every_segment_and_names_every_drop(prepared):
    root, out, good, report = prepared
    assert report.rows_written == len(good)
    assert {reason: len(where) for reason, where in report.dropped_by_reason.items()} == {
        "malformed_row": 3,
        "image_missing": 1,
    }
    assert "docs.jsonl:5" in report.dropped_by_reason["image_missing"]
    rows = [row for path in sorted(out.glob("*.parquet")) for row in pq.read_table(path).to_pylist()]
    assert len(rows) == len(good)
    for doc, row in zip(good, rows):
        segments = row["segments"]
        assert [s["text"] for s in segments] == doc["texts"]
        for segment, name in zip(segments, doc["images"]):
            assert segment["type"] == ("text" if name is None else "image")
            assert segment["image"] == (None if name is None else (root / "imgs" / name).read_bytes())
    info = json.loads((out / "parquet_info.json").read_text())
    assert sum(entry["num_rows"] for entry in info.values()) == len(good)
    assert sum(entry["num_row_groups"] for entry in info.values()) == 3
    written = [path.name for path in report.files_written]
    assert written[-3:] == ["parquet_info.json", "dataset_info.yaml", "run.yaml"], "every file written is named"


def test_run_validate_and_inspect_take_the_run_config_as_is(prepared, tmp_path):
    _, out, _, _ = prepared
    config = str(out / "run.yaml")
    result = runner.invoke(app, ["run", config, "--batches", "2", "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "samples: interleaved" in result.output
    result = runner.invoke(app, ["validate", config, "--num-workers", "2", "--json"])
    assert result.exit_code == 0, result.output
    group = json.loads(result.output)["groups"]["interleaved"]
    assert group["samples"] == 6 and group["skips"] == {}
    result = runner.invoke(app, ["inspect", config, "--out", str(tmp_path / "inspect"), "--batches", "1"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "inspect" / "packs.txt").read_text()
    for role in ("understood", "conditioned", "generated (loss)", "text, supervised"):
        assert role in text, role


def test_cli_prepare_interleaved_writes_the_run_config(prepared, tmp_path):
    root, _, _, _ = prepared
    out = tmp_path / "cli_out"
    args = ["prepare", "interleaved", str(root / "docs.jsonl"), str(out), "--image-root", str(root / "imgs")]
    result = runner.invoke(app, [*args, "--allow-drops"])  # 4 of its 10 documents are bad on purpose
    assert result.exit_code == 0, result.output
    assert (out / "run.yaml").is_file() and (out / "dataset_info.yaml").is_file()
    assert "dataset_info.yaml" in result.output and "run.yaml" in result.output, "the summary names both"


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_images_outside_the_image_root_are_dropped_by_name(tmp_path, how):
    import os

    (tmp_path / "imgs").mkdir()
    secret = tmp_path / "secret.png"
    secret.write_bytes(png_bytes(16, 16))
    (tmp_path / "imgs" / "a.png").write_bytes(png_bytes(16, 16))
    if how == "symlink":
        os.symlink(secret, tmp_path / "imgs" / "link.png")
    name = {"dotdot": "../secret.png", "absolute": str(secret), "symlink": "link.png"}[how]
    docs = [{"texts": ["ok", None], "images": [None, "a.png"]}, {"texts": ["leak", None], "images": [None, name]}]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")
    report = prepare_interleaved(tmp_path / "docs.jsonl", tmp_path / "out", image_root=tmp_path / "imgs")
    assert report.rows_written == 1
    assert list(report.dropped_by_reason) == ["image_outside_image_root"]
    assert "docs.jsonl:2" in report.dropped_by_reason["image_outside_image_root"]


@pytest.mark.parametrize("count", [5, 64])
@pytest.mark.parametrize("engine", ["plain", "sharded"])
def test_the_run_config_of_a_small_set_runs_with_two_workers(tmp_path, count, engine):
    from bagel_data.tools.prepare.sharded import prepare_sharded

    (tmp_path / "imgs").mkdir()
    for name, colour in COLOURS.items():
        (tmp_path / "imgs" / name).write_bytes(png_bytes(48, 40, colour))
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps(doc) + "\n" for doc in _docs(count)), encoding="utf-8")
    out = tmp_path / "out"
    if engine == "plain":
        prepare_interleaved(docs, out, image_root=tmp_path / "imgs")
    else:
        prepare_sharded("interleaved", docs, out, image_root=tmp_path / "imgs")
    result = runner.invoke(app, ["run", str(out / "run.yaml"), "--batches", "2", "--workers", "2"])
    assert result.exit_code == 0, result.output
