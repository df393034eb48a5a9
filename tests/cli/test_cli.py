"""The command line: demo, run and validate, as a user runs them."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from typer.testing import CliRunner

from bagel_data.cli.main import app
from helpers.golden import absolute_dataset_info, load_case

runner = CliRunner()


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    result = runner.invoke(app, ["demo", "--root", str(root), "--batches", "2", "--workers", "1"])
    assert result.exit_code == 0, result.output
    return root, result.output


def test_demo_prints_the_summary(demo_root):
    root, output = demo_root
    for line in ("batches", "fill ratio", "samples: t2i_pretrain", "checkpoint size per worker"):
        assert line in output
    assert (root / "run.yaml").exists() and (root / ".complete").exists()


def test_demo_prints_its_paths_whole_on_a_narrow_terminal(tmp_path, monkeypatch):
    import sys

    from rich.console import Console

    monkeypatch.setattr(sys.modules["bagel_data.cli.main"], "console", Console(width=40))  # a narrow terminal
    root = tmp_path / "my data sets" / "a demo with spaces in its long name"
    result = runner.invoke(app, ["demo", "--root", str(root), "--batches", "1", "--num-workers", "0"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert f"demo dataset in {root}" in lines and f"run config {root / 'run.yaml'}" in lines


def test_run_on_the_demo_config(demo_root):
    root, _ = demo_root
    result = runner.invoke(app, ["run", str(root / "run.yaml"), "--batches", "2", "--workers", "0"])
    assert result.exit_code == 0, result.output
    assert "samples: vlm_sft" in result.output or "samples: t2i_pretrain" in result.output
    # The DataMetrics figures a training loop would log, over this run.
    for key in ("data/token_share/t2i_pretrain", "data/sample_share/vlm_sft", "data/fill", "data/wait_seconds"):
        assert key in result.output, key


def test_validate_passes_on_clean_data(demo_root):
    root, _ = demo_root
    result = runner.invoke(app, ["validate", str(root / "run.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and set(report["groups"]) == {"t2i_pretrain", "unified_edit", "vlm_sft"}


@pytest.fixture()
def golden_run_config(golden_root, tmp_path):
    case, _, _ = load_case("packed_three_groups_flex")
    config = {"grouped_datasets": case["grouped_datasets"], "dataset_info": absolute_dataset_info(case)}
    config["packing"] = case["packing"]
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_validate_fails_and_names_bad_rows(golden_run_config):
    result = runner.invoke(
        app, ["validate", str(golden_run_config), "--json", "--world-size", "2", "--num-workers", "2"]
    )
    assert result.exit_code == 1
    report = json.loads(result.output[result.output.index("{") :])
    problems = "\n".join(report["errors"])
    for expected in ("caption_not_json", "image_file_missing", "json_invalid", "needs at least 4"):
        assert expected in problems
    assert report["groups"]["vlm_sft"]["skips"] == {"image_file_missing": 1, "json_invalid": 1, "no_loss_item": 1}


def test_strict_run_stops_at_the_first_bad_row_with_its_location(golden_run_config):
    result = runner.invoke(app, ["run", str(golden_run_config), "--batches", "2", "--workers", "1", "--strict"])
    assert result.exit_code == 2
    assert "BadSampleError" in result.output
    assert re.search(r"row group \d+|line\s+\d+", result.output), "names where the row lives"


def test_config_error_is_one_clear_line(golden_run_config, tmp_path):
    config = yaml.safe_load(golden_run_config.read_text())
    config["grouped_datasets"]["vlm_sft"]["num_used_data"] = [1, 2]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    result = runner.invoke(app, ["run", str(path), "--batches", "1"])
    assert result.exit_code == 2
    assert "vlm_sft.num_used_data" in result.output and "Traceback" not in result.output


def test_validate_table_is_whole_when_not_on_a_terminal(demo_root):
    root, _ = demo_root
    result = runner.invoke(app, ["validate", str(root / "run.yaml"), "--sample", "2", "--num-workers", "1"])
    assert result.exit_code == 0, result.output
    assert "…" not in result.output, "nothing cut to 80 columns"
    for text in ("t2i_pretrain", "unified_edit", "length min/median/max", "units per worker"):
        assert text in result.output


@pytest.mark.parametrize("command", [["--help"], ["prepare", "t2i", "--help"], ["validate", "--help"]])
def test_help_takes_the_width_of_a_wide_terminal(command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    result = runner.invoke(app, command)
    assert result.exit_code == 0
    widths = [len(line.rstrip()) for line in result.output.splitlines()]
    assert 80 < max(widths) <= 160  # the help's boxes span the terminal, not 80 columns
