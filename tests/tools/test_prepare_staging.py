"""`tools/prepare/staging.py`: a prepare writes beside OUT and moves in when done, so a run
that fails or writes nothing leaves OUT as it was, and `--resume` still finishes it."""

from __future__ import annotations

import importlib
import json

import pytest
from typer.testing import CliRunner

from bagel_data.cli.tools import prepare_app
from bagel_data.errors import ConfigError
from bagel_data.tools.prepare.sharded import prepare_sharded
from bagel_data.tools.prepare.staging import partial_folder
from helpers import prepare_inputs

shard_jobs = importlib.import_module("bagel_data.tools.prepare.shard_jobs")


@pytest.fixture()
def crash_on_shard(monkeypatch):
    """The engine dies while converting shard `index` (a killed worker, a full disk)."""
    real = shard_jobs.convert_shard

    def crash_at(index: int) -> None:
        def convert(rows, at, job):
            if at == index:
                raise RuntimeError("killed")
            return real(rows, at, job)

        monkeypatch.setattr(shard_jobs, "convert_shard", convert)

    yield crash_at
    monkeypatch.setattr(shard_jobs, "convert_shard", real)


def test_a_crashed_run_leaves_out_untouched_and_resume_finishes_it(tmp_path, crash_on_shard, monkeypatch):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 30, bad=False)
    out = tmp_path / "out"
    crash_on_shard(2)
    with pytest.raises(RuntimeError, match="killed"):
        prepare_sharded("t2i", raw, out, rows_per_shard=10)
    assert not out.exists(), "no half dataset a training run would read as whole"
    assert sorted(path.name for path in partial_folder(out).glob("*.parquet")) == [
        "part-00000.parquet",
        "part-00001.parquet",
    ]
    with pytest.raises(ConfigError, match="already holds a run.*--resume"):
        prepare_sharded("t2i", raw, out, rows_per_shard=10)
    monkeypatch.undo()
    report = prepare_sharded("t2i", raw, out, rows_per_shard=10, resume=True)
    assert report.rows_written == 30 and not partial_folder(out).exists()
    assert [path.parent for path in report.files_written] == [out] * 3 and all(
        p.is_file() for p in report.files_written
    )


def test_a_failed_overwrite_keeps_the_old_dataset(tmp_path, crash_on_shard):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 20, bad=False)
    out = tmp_path / "out"
    first = prepare_sharded("t2i", raw, out, rows_per_shard=10)
    before = {path.name: path.read_bytes() for path in first.files_written}
    crash_on_shard(1)
    with pytest.raises(RuntimeError):
        prepare_sharded("t2i", raw, out, rows_per_shard=5, overwrite=True)
    assert {path.name: path.read_bytes() for path in out.glob("*.parquet")} == before


def test_an_edit_run_that_keeps_no_row_writes_nothing(tmp_path):
    manifest = tmp_path / "edits.jsonl"
    manifest.write_text(json.dumps({"images": "a.jpg", "instructions": [["x"]]}) + "\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(prepare_app, ["edit", str(manifest), str(out)])
    assert result.exit_code == 1
    assert not out.exists() and not partial_folder(out).exists(), "no parquet_info.json of {} left behind"


def test_out_holding_other_shards_is_refused_before_any_work(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 3, bad=False)
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.parquet").write_bytes(b"x")
    with pytest.raises(ConfigError, match="already holds 1 parquet file"):
        prepare_sharded("t2i", raw, out)
    assert not partial_folder(out).exists()
