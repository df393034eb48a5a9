"""Smoke test of `bench --remote`: every phase of every storage is there, the local run sends
no request and the remote ones send what start-up, steady packs and resume need (nothing timed)."""

from __future__ import annotations

import json

import pytest

from bagel_data.bench.remote import print_remote_report, read_ahead_settings, remote_packing, run_remote_benchmark

pytest.importorskip("moto.server")


def test_quick_remote_benchmark_counts_each_phase(tmp_path, capsys):
    out = tmp_path / "remote.json"
    result = run_remote_benchmark(None, out, batches=2, quick=True, delays_ms=(0, 5))
    saved = json.loads(out.read_text())
    assert set(saved) == set(result) == {"config", "local", "s3_0ms", "s3_5ms", "against_local"}
    assert saved["config"]["read_ahead"] == read_ahead_settings(remote_packing(True))
    for name in ("local", "s3_0ms", "s3_5ms"):
        run = saved[name]
        assert run["startup"]["seconds"] > 0 and run["steady"]["packs"] == 2 and run["resume"]["seconds"] > 0
        assert run["resume"]["buffered_samples"] > 0, "resume rebuilds a buffer"
    assert saved["local"]["startup"]["requests"] == {} and saved["local"]["steady"]["requests_per_pack"] == 0
    for name in ("s3_0ms", "s3_5ms"):
        startup = saved[name]["startup"]["requests"]
        # the config's probe of data_dir and the listing, then the worker's own reads (read-ahead
        # brings later ones forward, within its byte budget): no listing by the worker
        assert startup["GET list"] == 2 and set(startup) <= {"GET list", "HEAD object", "GET object"}, startup
        assert sum(saved[name]["resume"]["requests"].values()) > 0
        assert set(saved["against_local"][name]) == {"steady_packs_per_second", "startup_seconds", "resume_seconds"}
    print_remote_report(result)
    assert "S3 +5 ms" in capsys.readouterr().out
