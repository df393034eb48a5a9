"""`bench startup`: a tiny run's phases, and the proxy's byte count it reports."""

from __future__ import annotations

import json

import pytest

from bagel_bench import startup

pytest.importorskip("moto.server")


@pytest.mark.slow
def test_a_tiny_run_reports_each_phase_with_requests_bytes_and_seconds(tmp_path, capsys):
    out = tmp_path / "startup.json"
    args = ["--root", str(tmp_path), "--tars", "3", "--per-tar", "4", "--photo-side", "96", "--delays", "0.001",
            "--ranks", "2", "--out", str(out)]  # fmt: skip
    assert startup.main(args) == 0
    results = json.loads(out.read_text())["+1ms"]
    assert set(results) == {"one_rank", "resume", "2_ranks_at_once"}
    assert results["2_ranks_at_once"]["processes"] == 2
    for phase in results.values():
        # the bytes are the tars' own (a pack reads at least one), requests counted by kind
        assert phase["bytes_sent"] > 0
        # the folder listed once per phase (one launch on one node), however many processes
        assert phase["listings_per_node"] == phase["requests"]["GET list"] == 1, phase["requests"]
        assert phase["requests_total"] == sum(phase["requests"].values())
        assert 0 < phase["seconds_to_first_pack"] <= phase["wall_seconds_launch_to_last_first_pack"]
    assert "2_ranks_at_once" in capsys.readouterr().out


def test_the_proxy_counts_the_bytes_it_sends_and_resets_them():
    from bagel_bench.s3_proxy import RequestCounter

    counter = RequestCounter()
    counter.add_bytes(10)
    counter.add_bytes(5)
    assert counter.reset_bytes() == 15 and counter.reset_bytes() == 0
