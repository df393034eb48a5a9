"""`bagel-data bench --mixing`: every mode replayed on a run config's real sample lengths."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from bagel_data.cli.main import app


def test_bench_mixing_reports_every_mode_with_shares_and_fill(tmp_path):
    demo = tmp_path / "demo"
    assert CliRunner().invoke(app, ["demo", "--root", str(demo), "--batches", "1", "--num-workers", "0"]).exit_code == 0
    out, plot = tmp_path / "mixing.json", tmp_path / "mixing.png"
    args = ["bench", "--mixing", str(demo / "run.yaml"), "--packs", "40", "--out", str(out), "--plot", str(plot)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    modes = json.loads(out.read_text())["modes"]
    assert set(modes) == {"samples/greedy", "samples/best_fit", "tokens/greedy", "tokens/best_fit"}
    for name, res in modes.items():
        assert len(res["fills"]) == 40 and all(0 < fill <= 1 for fill in res["fills"]), name
        assert abs(sum(res["token_share"].values()) - 1) < 1e-6
    assert modes["samples/best_fit"]["mean_fill"] >= modes["samples/greedy"]["mean_fill"]
    assert plot.stat().st_size > 0 and "tokens/best_fit" in result.output
