"""`--engine ray` gives the local engine's files byte for byte (needs the `ray` extra).

Skipped without Ray (CI does not install the heavy extra); run with `make test-ray`. One local
cluster of 2 CPUs serves the module: the engine uses a running cluster as it finds it.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from bagel_data.cli.tools import prepare_app
from bagel_data.tools.prepare.sharded import prepare_sharded
from helpers import prepare_inputs

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'bagel-data[ray]'")


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def files_of(folder) -> dict:
    """Every file's bytes; parquet_info.json keyed by file name (its keys hold the folder)."""
    files = {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}
    if "parquet_info.json" in files:
        info = json.loads(files["parquet_info.json"])
        files["parquet_info.json"] = {key.rsplit("/", 1)[-1]: value for key, value in info.items()}
    return files


def test_t2i_on_ray_writes_the_local_files_and_report(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 40)
    local = prepare_sharded("t2i", raw, tmp_path / "local", rows_per_group=3, rows_per_shard=6)
    calls = []
    remote = prepare_sharded(
        "t2i", raw, tmp_path / "ray", rows_per_group=3, rows_per_shard=6, engine="ray",
        progress=lambda *a: calls.append(a),
    )  # fmt: skip
    assert len(local.files_written) == 7
    assert files_of(tmp_path / "ray") == files_of(tmp_path / "local")
    assert remote.dropped == local.dropped and len(local.dropped) == 10
    assert remote.rows_written == local.rows_written
    assert calls[-1] == (41, 41) and len(calls) == 8


def test_tar_edit_vlm_and_interleaved_on_ray_equal_local(tmp_path):
    sources = {
        "t2i": (prepare_inputs.t2i_tar(tmp_path / "tars" / "00000.tar", 9).parent, {}),
        "edit": (prepare_inputs.edit_manifest(tmp_path / "edit", 12), {"data_dir": "/data/edit"}),
        "interleaved": (prepare_inputs.interleaved_docs(tmp_path / "docs", 12), {}),
    }
    for kind, (source, options) in sources.items():
        local = prepare_sharded(kind, source, tmp_path / kind / "local", rows_per_shard=4, **options)
        remote = prepare_sharded(kind, source, tmp_path / kind / "ray", rows_per_shard=4, engine="ray", **options)
        assert files_of(tmp_path / kind / "ray") == files_of(tmp_path / kind / "local"), kind
        assert remote.dropped == local.dropped and local.dropped, kind
    source = prepare_inputs.vlm_source(tmp_path / "vlm", 17)
    local = prepare_sharded("vlm", source, tmp_path / "local.jsonl", image_root=source.parent, rows_per_shard=4)
    remote = prepare_sharded(
        "vlm", source, tmp_path / "ray.jsonl", image_root=source.parent, rows_per_shard=4, engine="ray"
    )
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert (remote.dropped, remote.fixed) == (local.dropped, local.fixed) and local.fixed


def test_ray_resumes_a_run_the_local_engine_began(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 20)
    out = tmp_path / "out"
    full = prepare_sharded("t2i", raw, out, rows_per_shard=5)
    before = files_of(out)
    (out / ".prepare-state" / "part-00002.done").unlink()
    (out / "part-00002.parquet").unlink()
    resumed = prepare_sharded("t2i", raw, out, rows_per_shard=5, engine="ray", resume=True)
    assert files_of(out) == before and resumed.dropped == full.dropped


def test_cli_engine_ray(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 8)
    report = tmp_path / "report.json"
    args = ["t2i", str(raw), str(tmp_path / "out"), "--engine", "ray", "--rows-per-shard", "3", "--report", str(report)]
    args.append("--allow-drops")  # 3 of 9 rows are bad on purpose
    result = CliRunner().invoke(prepare_app, args)
    assert result.exit_code == 0, result.output
    saved = json.loads(report.read_text())
    assert saved["rows_written"] == 6 and len(saved["dropped"]) == 3
