"""The data-loss gate: `prepare` (every kind) and `run` exit 1 when more than
`--max-drop-fraction` of the input's / a group's rows is dropped, naming the likely cause;
`--allow-drops` accepts the loss."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import yaml
from PIL import Image
from typer.testing import CliRunner

from bagel_data.cli.main import DEMO_PACKING, app
from bagel_data.errors import ConfigError
from bagel_data.tools.drops import Loss, check_max_drop_fraction, group_losses, over_limit
from helpers import prepare_inputs

runner = CliRunner()


def flat(output: str) -> str:
    return " ".join(output.split())


# -- the rule ------------------------------------------------------------------------------
def test_a_loss_at_the_line_passes_and_one_row_more_fails():
    at_line, over = Loss("g", 1, 10, "x"), Loss("h", 2, 10, "y")
    assert at_line.fraction == 0.1 and over.fraction == 0.2
    assert over_limit([at_line, over], 0.1) == [over]
    assert over_limit([at_line, over], 0.2) == []
    assert over_limit([Loss("none", 0, 0, "")], 0.0) == [], "nothing read is no loss"
    assert over.describe() == "h: 2 of 10 rows dropped (20%). Likely cause: y"


@pytest.mark.parametrize("bad", [-0.1, 1.01, math.nan])
def test_a_fraction_outside_0_1_is_a_config_error(bad):
    with pytest.raises(ConfigError) as caught:
        check_max_drop_fraction(bad)
    assert caught.value.key == "max_drop_fraction" and "between 0 and 1" in str(caught.value)
    assert check_max_drop_fraction(0.0) == 0.0 and check_max_drop_fraction(1.0) == 1.0


def test_group_losses_count_skips_against_skips_plus_samples_and_name_the_top_reason():
    losses = group_losses(
        {"t2i": 90, "vlm": 20, "clean": 5},
        {"t2i": {"image_decode_failed": 10}, "vlm": {"image_file_missing": 25, "json_invalid": 5}, "clean": {}},
    )
    assert [(loss.name, loss.lost, loss.total) for loss in losses] == [("t2i", 10, 100), ("vlm", 30, 50)]
    assert losses[1].cause.startswith("25 skipped as image_file_missing: check the image path")
    (gone,) = group_losses({}, {"vlm": {"image_file_missing": 4}})  # no sample packed at all
    assert (gone.lost, gone.total, gone.fraction) == (4, 4, 1.0)


# -- prepare, every kind -------------------------------------------------------------------
def _vlm_rows(root, kept: int, missing: int):
    (root / "images").mkdir(parents=True)
    Image.new("RGB", (32, 32), (10, 20, 30)).save(root / "images" / "a.jpg")
    turns = [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "A square."}]
    rows = [{"image": "a.jpg", "conversations": turns}] * kept
    rows += [{"image": f"gone{i}.jpg", "conversations": turns} for i in range(missing)]
    (root / "rows.json").write_text(json.dumps(rows))
    return ["vlm", str(root / "rows.json"), str(root / "out.jsonl"), "--image-root", str(root / "images")]


def _inputs(kind: str, root):
    """Arguments of `prepare KIND` on inputs of which 2 or 3 rows in 10-23 are dropped."""
    if kind == "t2i":
        return ["t2i", str(prepare_inputs.t2i_folder(root / "raw", 12)), str(root / "out")]  # 3 of 13 dropped
    if kind == "edit":
        return ["edit", str(prepare_inputs.edit_manifest(root / "raw", 10)), str(root / "out")]  # 3 of 11
    if kind == "interleaved":
        docs = prepare_inputs.interleaved_docs(root / "raw", 10)
        return ["interleaved", str(docs), str(root / "out")]
    return _vlm_rows(root, kept=8, missing=2)


@pytest.mark.parametrize("kind", ["t2i", "edit", "vlm", "interleaved"])
def test_prepare_fails_over_the_line_and_allow_drops_keeps_going(tmp_path, kind):
    args = _inputs(kind, tmp_path / "a")
    result = runner.invoke(app, ["prepare", *args])
    assert result.exit_code == 1, result.output
    text = flat(result.output)
    assert "error: input:" in text and "rows dropped" in text and "Likely cause:" in text
    assert "--allow-drops" in text and "prepare summary" in text, "the summary comes first"
    again = _inputs(kind, tmp_path / "b")
    assert runner.invoke(app, ["prepare", *again, "--allow-drops"]).exit_code == 0
    loose = _inputs(kind, tmp_path / "c")
    assert runner.invoke(app, ["prepare", *loose, "--max-drop-fraction", "0.5"]).exit_code == 0


def test_prepare_vlm_with_most_media_missing_names_the_image_root(tmp_path):
    result = runner.invoke(app, ["prepare", *_vlm_rows(tmp_path, kept=26, missing=136)])
    assert result.exit_code == 1
    text = flat(result.output)
    assert "input: 136 of 162 rows dropped (84%)" in text and "is --image-root right?" in text


def test_prepare_vlm_exactly_at_the_line_exits_0(tmp_path):
    result = runner.invoke(app, ["prepare", *_vlm_rows(tmp_path, kept=9, missing=1)])
    assert result.exit_code == 0, result.output


def test_prepare_refuses_a_fraction_over_one(tmp_path):
    result = runner.invoke(app, ["prepare", *_vlm_rows(tmp_path, kept=9, missing=1), "--max-drop-fraction", "2"])
    assert result.exit_code == 2 and "max-drop-fraction" in result.output


# -- run -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo_missing_images(tmp_path_factory):
    """The demo data with one of the VLM group's two image folders gone."""
    from bagel_data.synthetic.dataset import write_demo_dataset

    root = tmp_path_factory.mktemp("drops")
    paths = write_demo_dataset(root)
    shutil.rmtree(root / "vlm" / "images" / "shard_01")
    run = {"grouped_datasets": str(paths.grouped_datasets), "dataset_info": str(paths.dataset_info)}
    run["packing"] = DEMO_PACKING  # the demo's small packs: a few seconds per run
    (root / "run.yaml").write_text(yaml.safe_dump(run))
    return root / "run.yaml"


def test_run_fails_when_a_group_loses_rows_and_names_the_cause(demo_missing_images):
    # Enough packs for the shuffled VLM stream to reach a row of the missing folder.
    args = ["run", str(demo_missing_images), "--batches", "12", "--num-workers", "0"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    text = flat(result.output)
    assert "error: vlm_sft:" in text and "skipped as image_file_missing: check the image path" in text
    assert "t2i_pretrain:" not in text.split("run summary")[-1].split("error:", 1)[-1], "clean groups pass"
    assert runner.invoke(app, [*args, "--allow-drops"]).exit_code == 0


# -- unreadable files count their rows ------------------------------------------------------
@pytest.fixture
def three_of_ten_truncated(tmp_path):
    """Ten T2I files of 8 rows each, three of them cut short (no footer): 30 % of the rows."""
    from helpers.builders import encode, t2i_run_config

    def row(i):
        return {"image": encode(Image.new("RGB", (32, 32), (i * 7 % 256, 0, 0))), "captions": {"c": f"red {i}"}}

    files = [[[row(10 * f + r) for r in range(8)]] for f in range(10)]
    config = t2i_run_config(tmp_path / "t2i", files, budget=60, num_used_data=10)
    for path in sorted((tmp_path / "t2i").glob("*.parquet"))[::4][:3]:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return config


def test_run_counts_an_unreadable_files_rows_from_its_siblings(three_of_ten_truncated):
    from bagel_data.tools.run import run_pipeline

    summary = run_pipeline(three_of_ten_truncated, num_batches=40, num_workers=0)
    assert summary.skips["t2i_pretrain"].get("unit_unreadable", 0) >= 3
    assert summary.unit_rows == {"t2i_pretrain": 8.0}  # the readable files' rows per file
    [loss] = group_losses(summary.samples, summary.skips, summary.unit_rows)
    assert loss.lost == 8 * summary.skips["t2i_pretrain"]["unit_unreadable"]
    assert loss.fraction == pytest.approx(0.3, abs=0.05)
    assert over_limit([loss], 0.1) == [loss]


def test_run_exits_1_when_three_of_ten_files_are_unreadable(three_of_ten_truncated, tmp_path):
    run = three_of_ten_truncated
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"grouped_datasets": run.grouped_datasets, "dataset_info": run.dataset_info,
                                    "packing": run.packing}))  # fmt: skip
    result = runner.invoke(app, ["run", str(path), "--batches", "40", "--num-workers", "0"])
    assert result.exit_code == 1, result.output
    assert "skipped as unit_unreadable" in flat(result.output)


def test_unit_rows_scale_only_the_unreadable_count():
    skips = {"g": {"unit_unreadable": 2, "image_decode_failed": 3}}
    [loss] = group_losses({"g": 95}, skips, {"g": 10.0})
    assert (loss.lost, loss.total) == (23, 118)
    [plain] = group_losses({"g": 95}, skips)
    assert (plain.lost, plain.total) == (5, 100)
    [fewer] = group_losses({"g": 95}, skips, {"g": 0.25})  # never fewer rows than units
    assert fewer.lost == 5
