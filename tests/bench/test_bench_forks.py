"""`bench forks`: DataLoader workers forked while this process reads the store skip nothing."""

from __future__ import annotations

import json

import pytest

from bagel_bench import forked_store

pytest.importorskip("moto.server")


@pytest.mark.slow
def test_workers_forked_while_the_parent_reads_a_store_read_their_own_bytes(tmp_path):
    out = tmp_path / "forks.json"
    args = ["--root", str(tmp_path), "--tars", "4", "--per-tar", "12", "--packs", "3", "--out", str(out)]
    assert forked_store.main(args) == 0
    results = json.loads(out.read_text())
    # every sample is well formed: a skip is a read that got another request's bytes
    assert results["worker_skips"] == {} and results["worker_samples"] > 0, results
    assert results["requests"].get("GET object", 0) > 0
