"""`inspect --step N` (`tools/inspect/steps.py`): packs drawn under the weights of step N."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from bagel_data.cli.main import app
from bagel_data.errors import ConfigError
from bagel_data.tools.inspect.steps import config_at_step, weights_at_step
from bagel_data.tools.run import RunConfig

PACKING = {"expected_num_tokens": 3584, "max_num_tokens": 4096, "max_num_tokens_per_sample": 2048,
           "prefer_buffer_before": 2048, "max_buffer_size": 20}  # fmt: skip
STAGES = {"t2i_pretrain": [[0, 1.0], [1000, 0.0]], "unified_edit": 0.0, "vlm_sft": [[0, 0.0], [1000, 1.0]]}


def _staged(groups: dict) -> RunConfig:
    return RunConfig({name: {**group, "weight": STAGES[name]} for name, group in groups.items()}, {}, {})


def test_weights_hold_from_their_step_on():
    config = _staged({name: {} for name in STAGES})
    assert weights_at_step(config, 999) == {"t2i_pretrain": 1.0, "unified_edit": 0.0, "vlm_sft": 0.0}
    assert weights_at_step(config, 1000) == {"t2i_pretrain": 0.0, "unified_edit": 0.0, "vlm_sft": 1.0}
    assert config_at_step(config, 1000).grouped_datasets["vlm_sft"]["weight"] == 1.0
    with pytest.raises(ConfigError, match="step"):
        weights_at_step(config, -1)
    with pytest.raises(ConfigError, match="every group's weight is 0"):
        config_at_step(RunConfig({"a": {"weight": [[0, 1.0], [5, 0.0]]}}, {}, {}), 5)


def test_inspect_step_shows_the_later_stage(tmp_path, demo_configs):
    demo = demo_configs
    groups = yaml.safe_load((demo / "grouped_datasets.yaml").read_text())
    run = demo / "staged.yaml"
    # Not mandatory: a mandatory group opens every pack whatever its weight.
    grouped = {name: {**group, "weight": STAGES[name], "is_mandatory": False} for name, group in groups.items()}
    run.write_text(
        yaml.safe_dump({"grouped_datasets": grouped, "dataset_info": "dataset_info.yaml", "packing": PACKING})
    )
    texts = {}
    for step in (0, 1000):
        out = tmp_path / f"step{step}"
        result = CliRunner().invoke(
            app, ["inspect", str(run), "--out", str(out), "--batches", "1", "--step", str(step)]
        )
        assert result.exit_code == 0, result.output
        texts[step] = (out / "packs.txt").read_text()
    assert "group t2i_pretrain" in texts[0] and "group vlm_sft" not in texts[0]
    assert "group vlm_sft" in texts[1000] and "group t2i_pretrain" not in texts[1000]
