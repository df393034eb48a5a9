"""`bagel-data bench --mixing`: every mode measured on real packs of a run config."""

from __future__ import annotations

import itertools
import json

from typer.testing import CliRunner

from bagel_bench.mixing import measure_mixing, pack_figures
from bagel_data.cli.main import app
from bagel_data.tools.run import build_from_run_config, load_run_config


def test_bench_mixing_reports_every_mode_with_shares_fill_and_dropouts(tmp_path, demo_root):
    out, plot = tmp_path / "mixing.json", tmp_path / "mixing.png"
    args = ["bench", "mixing", str(demo_root / "run.yaml"), "--packs", "12", "--out", str(out), "--plot", str(plot)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    results = json.loads(out.read_text())
    modes = results["modes"]
    assert set(modes) == {"samples/greedy", "samples/best_fit", "tokens/greedy", "tokens/best_fit"}
    for name, res in modes.items():
        assert len(res["fills"]) == 12 and all(0 < fill <= 1 for fill in res["fills"]), name
        assert abs(sum(res["token_share"].values()) - 1) < 1e-3
        assert res["max_token_share_error_points"] >= 0
    # The demo run config sets no dropout: BAGEL's defaults, and the report says so.
    assert results["dropouts"] == {
        "text_cond_dropout_prob": 0.1,
        "vit_cond_dropout_prob": 0.4,
        "vae_cond_dropout_prob": 0.1,
    }
    assert modes["samples/best_fit"]["mean_fill"] >= modes["samples/greedy"]["mean_fill"]
    assert plot.stat().st_size > 0 and "tokens/best_fit" in result.output and "vit 0.4" in result.output


def test_the_figures_are_those_of_the_pipelines_own_packs(demo_root):
    """Not a replay: the same packs as iterating the run config's dataset, dropout on; and
    leaving the resize out (the default) changes none of them."""
    run_yaml = demo_root / "run.yaml"
    mode = [("tokens", "best_fit")]
    fast = measure_mixing(str(run_yaml), packs=6, modes=mode)["modes"]["tokens/best_fit"]
    exact = measure_mixing(str(run_yaml), packs=6, modes=mode, pixels=True)["modes"]["tokens/best_fit"]
    assert {k: v for k, v in fast.items() if k != "seconds"} == {k: v for k, v in exact.items() if k != "seconds"}
    run = load_run_config(str(run_yaml))
    run = run.__class__(
        run.grouped_datasets, run.dataset_info, {**run.packing, "mix_by": "tokens", "pack_strategy": "best_fit"}
    )
    dataset = build_from_run_config(run, rank=0, world_size=1, num_workers=1).dataset
    cfg = dataset.config
    weights = dict(zip(dataset.group_names, dataset.grouped_weights))
    direct = pack_figures(itertools.islice(iter(dataset), 6), weights, cfg.max_num_tokens, cfg.use_flex, 8)
    assert direct["fills"] == exact["fills"] and direct["token_share"] == exact["token_share"]
