"""`bench shuffle-memory`: each variant in a process of its own, its figures written."""

from __future__ import annotations

import json

from bagel_bench import shuffle_memory


def test_a_tiny_run_measures_each_variant(tmp_path, capsys):
    out = tmp_path / "memory.json"
    args = ["--files", "2", "--rows", "150", "--side", "16", "--count", "300", "--rounds", "1", "--out", str(out)]
    shuffle_memory.main(args)
    results = json.loads(out.read_text())
    assert results["data"]["rows"] == 150
    variants = results["variants"]
    assert list(variants) == [name for name, _, _ in shuffle_memory.VARIANTS]
    for found in variants.values():
        assert found["samples"] == 300 and found["peak_rss_over_start_mb"] >= 0 and found["arrow_peak_mb"] > 0
    off, _, _, default = variants.values()
    # storage order reads 150 rows of a row group before the next; 4 open ones interleave
    assert off["same_row_group_share"] > 0.95 > 0.5 > default["same_row_group_share"]
    assert "wrote" in capsys.readouterr().out
