"""bench read-ahead-load's own arithmetic and data (bagel_bench/read_ahead_load.py): the
figures in docs/performance.md rest on its pairing of rounds and on its shards."""

from __future__ import annotations

import pyarrow.parquet as pq

from bagel_bench import read_ahead_load


def test_ratios_are_paired_within_a_round_and_medians_taken_over_rounds():
    figures = {"base": iter([10.0, 20.0, 40.0]), "other": iter([5.0, 30.0, 20.0])}
    runs = {name: (lambda it=values: {"seconds": next(it), "requests": 1}) for name, values in figures.items()}
    summary = read_ahead_load.rounds(runs, 3, "seconds", "base")
    assert summary["base"]["median"] == 20.0 and summary["other"]["median"] == 20.0
    # per round: 0.5, 1.5, 0.5 -> 0.5 (a ratio of the medians would say 1.0)
    assert summary["other"]["ratio_to_base"] == 0.5
    assert summary["base"]["ratio_to_base"] == 1.0
    assert [row["seconds"] for row in summary["other"]["rounds"]] == [5.0, 30.0, 20.0]


def test_shards_are_written_once_with_their_sizes(tmp_path):
    folder = read_ahead_load.write_shards(tmp_path / "s", files=3, groups=2, rows=4, side=32, seed=0)
    paths = sorted(folder.glob("*.parquet"))
    assert len(paths) == 3
    meta = pq.read_metadata(paths[0])
    assert meta.num_row_groups == 2 and meta.num_rows == 8
    stamp = paths[0].stat().st_mtime_ns
    read_ahead_load.write_shards(tmp_path / "s", files=3, groups=2, rows=4, side=32, seed=1)
    assert paths[0].stat().st_mtime_ns == stamp  # a complete folder is kept
