"""`tools/prepare/small_sets.py`: prepare says when it wrote fewer units than a typical job
needs, and the option it names fixes it."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from bagel_data.cli.tools import prepare_app
from bagel_data.sharding import units_needed
from bagel_data.tools.prepare.sharded import prepare_sharded
from bagel_data.tools.prepare.small_sets import TYPICAL_JOB
from helpers import prepare_inputs

NEEDED = units_needed(*TYPICAL_JOB)


def test_one_t2i_shard_is_warned_and_the_named_option_fixes_it(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 5 * NEEDED - 1, bad=False)
    [warning] = prepare_sharded("t2i", raw, tmp_path / "out").warnings
    assert warning.startswith("1 parquet file(s) written") and f"needs {NEEDED}" in warning
    rows_per_shard = int(re.search(r"--rows-per-shard (\d+)", warning).group(1))
    assert rows_per_shard == 4
    again = prepare_sharded("t2i", raw, tmp_path / "out", rows_per_shard=rows_per_shard, overwrite=True)
    assert len(again.files_written) >= NEEDED and again.warnings == ()


def test_exactly_enough_units_is_not_warned(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", NEEDED, bad=False)
    assert prepare_sharded("t2i", raw, tmp_path / "out", rows_per_shard=1).warnings == ()
    fewer = prepare_sharded("t2i", raw, tmp_path / "fewer", rows_per_shard=2).warnings
    assert len(fewer) == 1 and fewer[0].startswith(f"{NEEDED // 2} parquet file(s)")


def test_edit_counts_row_groups_and_a_tiny_set_says_so(tmp_path):
    manifest = prepare_inputs.edit_manifest(tmp_path / "raw", 5)
    [warning] = prepare_sharded("edit", manifest, tmp_path / "out").warnings
    assert warning.startswith("1 row group(s) written") and "only 4 rows were written" in warning
    assert prepare_sharded("edit", manifest, tmp_path / "one", rows_per_group=1).warnings[0].startswith("4 row group")


def test_the_command_prints_the_warning(tmp_path):
    raw = prepare_inputs.t2i_folder(tmp_path / "raw", 3 * NEEDED, bad=False)
    result = CliRunner().invoke(prepare_app, ["t2i", str(raw), str(tmp_path / "out")])
    assert result.exit_code == 0
    assert "warning: 1 parquet file(s) written" in result.output and "--rows-per-shard 3" in result.output


@pytest.mark.parametrize(("world_size", "num_workers", "needed"), [(1, 0, 1), (2, 2, 4), (4, 3, 12)])
def test_units_needed(world_size, num_workers, needed):
    assert units_needed(world_size, num_workers) == needed
