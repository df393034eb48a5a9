"""`bench tars`'s pieces: the tars it writes, their prepared copy, one tiny run's figures."""

from __future__ import annotations

import json
import tarfile

from bagel_bench import tars


def test_the_tars_and_their_copy_hold_the_same_samples(tmp_path):
    folder = tars.write_tars(tmp_path / "tars", 2, 5, 64)
    assert tars.write_tars(folder, 2, 5, 64) == folder  # kept when already there
    with tarfile.open(folder / "00001.tar") as archive:
        names = archive.getnames()
    assert names[:2] == ["00001/00000.jpg", "00001/00000.txt"] and len(names) == 10
    copy = tars.prepared_copy(folder, tmp_path / "prepared")
    local = tars.read_path(folder, 2, 0.0)
    assert local["samples"] == tars.read_path(copy, 1, 0.0)["samples"] == tars.READ_PASSES * 10


def test_a_tiny_run_reports_every_case_and_ratio(tmp_path, capsys):
    out = tmp_path / "tars.json"
    args = ["--root", str(tmp_path), "--tars", "2", "--per-tar", "6", "--photo-side", "96", "--max-image-size", "64",
            "--delay", "0.001", "--rounds", "1", "--warmup", "0", "--packs", "1", "--out", str(out)]  # fmt: skip
    assert tars.main(args) == 0
    results = json.loads(out.read_text())
    assert set(results["packs_per_second"]) == set(tars.CASES)
    for figure in ("packs_per_second", "packs_per_cpu_second", "reads_samples_per_second"):
        assert results[f"{figure}_tars_vs_prepared"] > 0 and results[f"{figure}_delay_vs_local"] > 0
    assert all(run["reads"]["samples"] == tars.READ_PASSES * 12 for runs in results["rounds"].values() for run in runs)
    assert results["index_build"]["local"]["cold_seconds_per_tar"] > 0
    assert "tars_vs_prepared" in capsys.readouterr().out


def test_a_tiny_store_run_counts_the_requests_of_the_tars_on_s3(tmp_path):
    """`--store`: the tars in moto behind the delaying proxy; a warm index costs no request."""
    import pytest

    pytest.importorskip("moto.server")
    out = tmp_path / "tars.json"
    args = ["--root", str(tmp_path), "--tars", "2", "--per-tar", "6", "--photo-side", "96", "--max-image-size", "64",
            "--delay", "0.001", "--rounds", "1", "--warmup", "0", "--packs", "1", "--store",
            "--out", str(out)]  # fmt: skip
    assert tars.main(args) == 0
    results = json.loads(out.read_text())
    assert set(results["packs_per_second"]) == {*tars.CASES, tars.STORE_CASE}
    assert results["packs_per_second_store_vs_local"] > 0
    built = results["index_build"]["store +1ms"]
    assert built["mapped_requests_per_tar"] == 0 and built["cold_requests_per_tar"] >= 1
    [store_run] = results["rounds"][tars.STORE_CASE]
    assert sum(store_run["requests"].values()) > 0
