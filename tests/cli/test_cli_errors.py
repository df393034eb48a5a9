"""Every failure on the command line is a short message and a non-zero exit; the traceback
only with --debug; no progress bar or empty table left behind."""

from __future__ import annotations

import importlib
import sys

import pytest
import yaml
from typer.testing import CliRunner

from bagel_data.cli.errors import LIBRARY_ERROR_EXIT, UNEXPECTED_ERROR_EXIT
from bagel_data.cli.main import app
from helpers.golden import absolute_dataset_info, load_case

runner = CliRunner()
run_module = importlib.import_module("bagel_data.tools.run")
sharded_module = importlib.import_module("bagel_data.tools.prepare.sharded")


@pytest.fixture()
def run_yaml(golden_root, tmp_path):
    case, _, _ = load_case("packed_three_groups_flex")
    config = {
        "grouped_datasets": case["grouped_datasets"],
        "dataset_info": absolute_dataset_info(case),
        "packing": case["packing"],
    }

    def write(**group_changes) -> str:
        for group, changes in group_changes.items():
            config["grouped_datasets"][group].update(changes)
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(config))
        return str(path)

    return write


def test_config_error_in_a_group_value(run_yaml):
    result = runner.invoke(app, ["run", run_yaml(vlm_sft={"is_mandatory": "false"}), "--batches", "1"])
    assert result.exit_code == LIBRARY_ERROR_EXIT
    assert "ConfigError: vlm_sft.is_mandatory = 'false'" in result.output
    assert "Traceback" not in result.output
    assert "packing" not in result.output.replace("packing.", ""), "no progress bar after the error"


def test_yaml_syntax_error_names_the_file_and_line(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("grouped_datasets:\n  t2i_pretrain: {weight: 1\npacking: {}\n")
    result = runner.invoke(app, ["run", str(path)])
    assert result.exit_code == LIBRARY_ERROR_EXIT
    assert "run.yaml" in result.output and "line 3" in result.output
    assert "Traceback" not in result.output


def test_unexpected_error_is_one_line_with_a_hint(run_yaml, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(run_module, "run_pipeline", broken)  # the commands import it on use
    result = runner.invoke(app, ["run", run_yaml(), "--batches", "1"])
    assert result.exit_code == UNEXPECTED_ERROR_EXIT
    assert "RuntimeError: boom" in result.output and "--debug" in result.output
    assert "Traceback" not in result.output


def _function_under_a_long_path(tmp_path, monkeypatch, name: str):
    """`name`, a function that raises, defined in a module whose path is longer than a line:
    its traceback lines are as long as those of a clone in a deep folder."""
    folder = tmp_path / ("a_long_folder_name_" * 6)
    folder.mkdir()
    (folder / "far_away_module.py").write_text(f"def {name}(*args, **kwargs):\n    raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "far_away_module", raising=False)
    return getattr(importlib.import_module("far_away_module"), name)


def test_debug_shows_the_traceback(run_yaml, monkeypatch, tmp_path):
    broken = _function_under_a_long_path(tmp_path, monkeypatch, "broken")
    monkeypatch.setattr(run_module, "run_pipeline", broken)  # the commands import it on use
    result = runner.invoke(app, ["--debug", "run", run_yaml(), "--batches", "1"])
    assert result.exit_code == UNEXPECTED_ERROR_EXIT
    assert "Traceback" in result.output
    # The frame's line whole, however long the path: rich must not wrap it at the width.
    assert f'{broken.__code__.co_filename}", line 2, in broken' in result.output
    # The flag does not stick to the next command.
    result = runner.invoke(app, ["run", run_yaml(), "--batches", "1"])
    assert "Traceback" not in result.output


def test_validate_on_a_config_error_prints_no_empty_table(run_yaml):
    result = runner.invoke(app, ["validate", run_yaml(t2i_pretrain={"weight": -1})])
    assert result.exit_code == 1
    assert "t2i_pretrain.weight" in result.output and "NOT OK" in result.output
    assert "bagel-data validate" not in result.output and "units per worker" not in result.output


@pytest.mark.parametrize(
    ("option", "command"), [("--world-size", "run"), ("--world-size", "validate"), ("--num-workers", "run")]
)
def test_impossible_topology_is_refused_by_the_option(option, command):
    result = runner.invoke(app, [command, "x.yaml", option, "0" if option == "--world-size" else "-1"])
    assert result.exit_code == 2
    assert "Invalid value" in result.output and option in result.output


def test_prepare_unexpected_error(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("images")

    monkeypatch.setattr(sharded_module, "prepare_sharded", broken)  # the command imports it on use
    source = tmp_path / "rows.json"
    source.write_text("[]")
    result = runner.invoke(app, ["prepare", "vlm", str(source), str(tmp_path / "out.jsonl"), "--image-root", "."])
    assert result.exit_code == UNEXPECTED_ERROR_EXIT
    assert "KeyError" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("command", ["run", "inspect"])
def test_a_rank_outside_the_world_is_a_config_error_not_a_crash(run_yaml, command):
    result = runner.invoke(app, [command, run_yaml(), "--rank", "2", "--world-size", "2"])
    text = " ".join(result.output.split())
    assert result.exit_code == LIBRARY_ERROR_EXIT, result.output
    assert "error: ConfigError: rank = 2: ranks count from 0, so --rank 2 needs --world-size of at least 3" in text
    assert "unexpected" not in text and "report it" not in text
