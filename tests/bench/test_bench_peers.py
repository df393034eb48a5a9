"""`bench peers`: the read path and the shuffle side by side with Megatron-Energon and MosaicML
Streaming. Here without the peers (CI has none): they are skipped with the install line, and
ours is measured on the same tiny data."""

from __future__ import annotations

import json
import tarfile

import pytest

from bagel_bench import peer_runner, peers, peers_shuffle


def test_without_a_peers_python_the_peers_are_skipped_with_the_install_line(tmp_path, monkeypatch):
    monkeypatch.delenv("BAGEL_PEERS_PYTHON", raising=False)
    python, found = peers.find_peers(None)
    assert python is None and found["skipped"].startswith("not installed:") and "pip install" in found["skipped"]
    python, found = peers.find_peers(str(tmp_path / "no-such-python"))
    assert python is None and "pip install" in found["skipped"] and "no-such-python" in found["skipped"]


def test_a_python_without_the_peers_is_skipped_naming_what_is_missing(monkeypatch):
    import sys

    python, found = peers.find_peers(sys.executable)  # the project's own environment: no peers there
    assert python is None
    assert "megatron-energon" in found["skipped"] and "mosaicml-streaming" in found["skipped"]


def test_the_shuffle_tars_hold_one_row_group_each_named_by_file_group_and_row(tmp_path):
    from bagel_bench.shuffle import write_data

    (tmp_path / "parquet").mkdir()
    write_data(tmp_path / "parquet", 2, 2, 3)
    peers_shuffle.write_tars(tmp_path / "parquet", tmp_path / "tars")
    assert sorted(path.name for path in (tmp_path / "tars").glob("*.tar")) == [
        "f000g0.tar", "f000g1.tar", "f001g0.tar", "f001g1.tar"]  # fmt: skip
    samples = list(peer_runner.tar_samples(tmp_path / "tars" / "f001g1.tar"))
    assert [key for key, _ in samples] == ["f001g1r00000", "f001g1r00001", "f001g1r00002"]
    assert [peers_shuffle.key_of(key) for key, _ in samples] == [(1, 1, 0), (1, 1, 1), (1, 1, 2)]
    assert json.loads(samples[2][1]["txt"]) == {"a": "a noisy picture, file 1 group 1 row 2"}
    with tarfile.open(tmp_path / "tars" / "f000g0.tar") as archive:
        assert archive.getnames()[:2] == ["f000g0r00000.jpg", "f000g0r00000.txt"]


@pytest.mark.slow
def test_a_tiny_read_run_measures_ours_everywhere_and_skips_the_peers(tmp_path, monkeypatch, capsys):
    pytest.importorskip("moto.server")
    monkeypatch.delenv("BAGEL_PEERS_PYTHON", raising=False)
    out = tmp_path / "peers.json"
    args = ["--root", str(tmp_path), "--tars", "2", "--per-tar", "6", "--photo-side", "96", "--workers", "0",
            "--delays-ms", "1", "--rounds", "1", "--warmup", "1", "--count", "4", "--out", str(out)]  # fmt: skip
    assert peers.main(args) == 0
    results = json.loads(out.read_text())
    assert results["peers"]["skipped"].startswith("not installed:")
    assert "not installed: " in capsys.readouterr().out
    assert set(results["rounds"][0]) == {f"{loader} w0 {where}" for loader in ("ours_tars", "ours_parquet")
                                        for where in ("local", "+1ms")}  # fmt: skip
    remote = results["rounds"][0]["ours_tars w0 +1ms"]
    assert remote["samples_per_second"] > 0 and remote["requests"] > 0 and remote["bytes"] > 0
    assert results["summary"]["ours_parquet w0 +1ms"]["vs_own_local"]["median"] > 0


@pytest.mark.slow
def test_a_tiny_shuffle_run_measures_ours_and_skips_the_peers(tmp_path, monkeypatch):
    pytest.importorskip("moto.server")
    monkeypatch.delenv("BAGEL_PEERS_PYTHON", raising=False)
    out = tmp_path / "shuffle.json"
    args = ["--shuffle", "--shapes", "tiny", "--windows", "0", "16", "--packs", "1", "--rounds", "1",
            "--delay", "0.001", "--out", str(out)]  # fmt: skip
    assert peers.main(args) == 0
    results = json.loads(out.read_text())
    assert results["peers"]["skipped"].startswith("not installed:")
    shape = results["shapes"]["tiny"]
    assert shape["energon"] == {} and shape["streaming_py1e"] == {}
    off, on = shape["ours_local"]["0"], shape["ours_local"]["16"]
    assert off["same_row_group_share"] > 0.7 > on["same_row_group_share"]  # the walk by rows mixes row groups
    assert shape["ours"]["0"]["bytes_per_sample"] > 0 and shape["ours"]["16"]["bytes_vs_ours_off"] > 0
    assert set(shape["packed_tokens_per_cpu_s_vs_off"]) == {"16"}  # against the window 0 of its round
