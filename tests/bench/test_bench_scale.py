"""`bench --scale`'s pieces: the shards it writes, its index children, its report."""

from __future__ import annotations

import pyarrow.parquet as pq

from bagel_bench import scale


def test_shards_are_readable_t2i_files_of_one_row(tmp_path):
    folder = scale.write_shards(tmp_path / "t2i", 3)
    files = sorted(folder.glob("*.parquet"))
    assert [f.name for f in files] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    tables = [pq.read_table(f) for f in files]
    assert all(t.num_rows == 1 and t.column_names == ["image", "captions"] for t in tables)
    assert scale.write_shards(folder, 3) == folder  # kept when already there


def test_index_children_build_then_map_from_the_cache(tmp_path):
    path = str(scale.write_jsonl(tmp_path / "rows.jsonl", 2000))
    cache = str(tmp_path / "cache")
    built = scale._index_runs(path, 2000, cache, None)[0]
    mapped = scale._index_runs(path, 2000, cache, None)[0]
    assert built["lines"] == mapped["lines"] == 2000
    assert len(list((tmp_path / "cache").glob("jsonl-*/offsets.npy"))) == 1
    assert built["peak_rss_mb"] >= 0 and mapped["seconds"] > 0


def test_report_prints_each_point(capsys):
    run = {"seconds": 1.0, "peak_rss_mb": 2.0, "peak_over_steady": 1.25}
    point = {"in_memory": run, "steady_mb": 1.6, "cold_cache": run, "mapped_second_start": run,
             f"cold_{scale.WORKERS}_processes": {"over_one_process": 1.1},
             "vlm_start": {"construct_seconds": 0.5, "first_pack_seconds": 0.25},
             "vlm_start_mapped": {"construct_seconds": 0.125, "first_pack_seconds": 0.25}}  # fmt: skip
    res = {"shards": {"10": {"construct_seconds": 0.1, "first_pack_seconds": 0.2, "peak_rss_mb": 3.0}},
           "jsonl": {"100000": point}}  # fmt: skip
    scale.print_scale(res)
    out = capsys.readouterr().out
    assert "100000" in out and "1.25" in out and "1.10" in out and "0.75" in out and "0.38" in out
