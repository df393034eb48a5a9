"""`bagel-data validate` on a run config with a mixture schedule: it prints the phases."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from bagel_data.cli.main import app
from bagel_data.tools.run import load_run_config
from bagel_data.tools.validate import validate_config


def test_validate_prints_the_schedule_phases(demo_configs):
    demo = demo_configs
    groups_file = demo / "grouped_datasets.yaml"
    groups = yaml.safe_load(groups_file.read_text())
    groups["vlm_sft"]["weight"] = [[0, 1.0], [5000, 0.25]]
    groups["unified_edit"]["weight"] = [[0, 0.0], [5000, 0.3]]
    groups_file.write_text(yaml.safe_dump(groups))
    report = validate_config(load_run_config(str(demo / "run.yaml")), num_workers=1, sample=4)
    assert report.phases == [
        {"from_step": 0, "weights": {"t2i_pretrain": 0.5, "unified_edit": 0.0, "vlm_sft": 1.0}},
        {"from_step": 5000, "weights": {"t2i_pretrain": 0.5, "unified_edit": 0.3, "vlm_sft": 0.25}},
    ]
    (lag,) = report.lags  # the change point's lag, from the walk's median lengths (tests/tools/test_lag.py)
    assert lag["step"] == 5000 and set(lag["waiting"]) == {"vlm_sft"} and lag["target_steps"] > 0
    result = CliRunner().invoke(app, ["validate", str(demo / "run.yaml"), "--num-workers", "1", "--sample", "4"])
    assert "mixture schedule" in result.output and "5,000" in result.output, result.output
    said = " ".join(result.output.split())  # rich wraps at the terminal's width
    assert "stage 2 at step 5,000" in said and "buffered samples of vlm_sft" in said, said
    groups["unified_edit"]["weight"] = [[0, 1.0], [5000, -1]]
    groups_file.write_text(yaml.safe_dump(groups))
    result = CliRunner().invoke(app, ["validate", str(demo / "run.yaml"), "--num-workers", "1", "--sample", "4"])
    assert result.exit_code == 1 and "unified_edit.weight" in result.output, result.output
