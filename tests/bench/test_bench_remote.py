"""Smoke test of `bench --remote`: every phase of every storage is there, the local run sends
no request and the remote ones send what start-up, steady packs and resume need (nothing timed)."""

from __future__ import annotations

import json

import pytest

from bagel_bench.remote import (
    against_local,
    median_run,
    print_remote_report,
    read_ahead_settings,
    remote_packing,
    run_remote_benchmark,
)

pytest.importorskip("moto.server")


def test_quick_remote_benchmark_counts_each_phase(tmp_path, capsys):
    out = tmp_path / "remote.json"
    result = run_remote_benchmark(None, out, batches=2, quick=True, delays_ms=(0, 5))
    saved = json.loads(out.read_text())
    assert set(saved) == set(result) == {"config", "local", "s3_0ms", "s3_5ms", "against_local", "rounds"}
    assert saved["config"]["rounds"] == 1 and all(len(saved["rounds"][name]) == 1 for name in saved["rounds"])
    assert saved["config"]["read_ahead"] == read_ahead_settings(remote_packing(True))
    for name in ("local", "s3_0ms", "s3_5ms"):
        run = saved[name]
        assert run["startup"]["seconds"] > 0 and run["steady"]["packs"] == 2 and run["resume"]["seconds"] > 0
        assert run["resume"]["buffered_samples"] > 0, "resume rebuilds a buffer"
    assert saved["local"]["startup"]["requests"] == {} and saved["local"]["steady"]["requests_per_pack"] == 0
    for name in ("s3_0ms", "s3_5ms"):
        startup = saved[name]["startup"]["requests"]
        # data_dir's listing (the config's probe of the folder too), then the worker's own reads
        # (read-ahead brings later ones forward, within its byte budget): no listing by the worker
        assert startup["GET list"] == 1 and set(startup) <= {"GET list", "HEAD object", "GET object"}, startup
        assert sum(saved[name]["resume"]["requests"].values()) > 0
        assert set(saved["against_local"][name]) == {"steady_packs_per_second", "startup_seconds", "resume_seconds"}
    print_remote_report(result)
    assert "S3 +5 ms" in capsys.readouterr().out


def _phases(startup: float, packs_per_second: float, resume: float) -> dict:
    return {
        "startup": {"seconds": startup, "requests": {"GET list": 2}},
        "steady": {"seconds": 16 / packs_per_second, "packs_per_second": packs_per_second, "requests_per_pack": 1.0},
        "resume": {"seconds": resume, "buffered_samples": 50, "requests": {"GET object": 21}},
    }


def test_figures_are_medians_over_rounds_and_ratios_are_paired_within_a_round():
    # Round 2 ran on a loaded machine: both sides slow. Paired, its ratio is like the others.
    local = [_phases(1.0, 4.0, 2.0), _phases(3.0, 1.0, 6.0), _phases(1.2, 3.0, 2.2)]
    remote = [_phases(2.0, 3.6, 2.2), _phases(6.0, 0.9, 6.6), _phases(2.4, 2.7, 2.42)]
    merged = median_run(remote)
    assert merged["startup"]["seconds"] == 2.4 and merged["steady"]["packs_per_second"] == 2.7
    assert merged["resume"]["seconds"] == 2.42 and merged["resume"]["requests"] == {"GET object": 21}
    ratios = against_local({"local": local, "s3_20ms": remote})["s3_20ms"]
    assert ratios["steady_packs_per_second"] == pytest.approx(0.9)  # every round's ratio is 0.9
    assert ratios["startup_seconds"] == pytest.approx(2.0)
    assert ratios["resume_seconds"] == pytest.approx(1.1)
    # One round's remote side alone slow: paired, the median stays 0.9 (unpaired: 1.5 / 3.0 = 0.5).
    remote[2] = _phases(2.4, 1.5, 2.42)
    assert against_local({"local": local, "s3_20ms": remote})["s3_20ms"]["steady_packs_per_second"] == pytest.approx(
        0.9
    )
