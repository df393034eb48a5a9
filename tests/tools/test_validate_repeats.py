"""`validate` names it when num_used_data repeats a group's files (`validate.repeats_note`)."""

from __future__ import annotations

from bagel_data.tools.validate import repeats_note, validate_config
from helpers.builders import png_bytes, t2i_run_config


def test_one_file_used_ten_times_is_named(tmp_path, tokenizer):
    row = {"image": png_bytes(48, 32, (10, 80, 160)), "captions": {"a": "a blue square"}}
    config = t2i_run_config(tmp_path, [[[row] * 2]], budget=4096, num_used_data=10)
    report = validate_config(config, num_workers=1, tokenizer=tokenizer)
    assert "t2i_pretrain: num_used_data repeats files: 10 files from 1, each read 10 times" in report.warnings


def test_files_used_once_get_no_note():
    assert repeats_note("g", ["a.parquet", "b.parquet"]) == []
    assert repeats_note("g", [("a.parquet", 0), ("a.parquet", 1), ("b.parquet", 0)]) == []  # row groups, not repeats
    assert repeats_note("g", [0, 1, 2]) == []  # JSONL lines are not files


def test_row_group_units_count_readings_of_their_file():
    units = [("a.parquet", 0), ("a.parquet", 1)] * 3 + [("b.parquet", 0)] * 2
    assert repeats_note("g", units) == ["g: num_used_data repeats files: 5 files from 2, each read 2 to 3 times"]
    assert repeats_note("g", ["a", "b", "a"]) == [
        "g: num_used_data repeats files: 3 files from 2, each read 1 to 2 times"
    ]
