"""`validate` in compat mode reports the reference's split and names the files it leaves out
(`tools/validate_compat.py`): 7 files over 2 workers are read 3 + 3, the seventh never."""

from __future__ import annotations

import collections
import dataclasses

from bagel_data.tools.validate import validate_config
from bagel_data.tools.validate_compat import file_warnings
from helpers.builders import png_bytes, t2i_run_config


def seven_files(tmp_path):
    row = {"image": png_bytes(48, 32, (10, 80, 160)), "captions": {"a": "a blue square"}}
    return t2i_run_config(tmp_path, [[[row]] for _ in range(7)], budget=4096, num_used_data=7)


def test_compat_reports_the_reference_split_and_names_the_file_never_read(tmp_path, tokenizer):
    config = seven_files(tmp_path)
    default = validate_config(config, num_workers=2, tokenizer=tokenizer)
    assert default.groups["t2i_pretrain"].units_per_worker == [[4, 3]]
    assert not [w for w in default.warnings if "never read" in w]
    compat = validate_config(dataclasses.replace(config, compat="bagel"), num_workers=2, tokenizer=tokenizer)
    assert compat.groups["t2i_pretrain"].units_per_worker == [[3, 3]]
    never = [w for w in compat.warnings if "is never read" in w]
    assert len(never) == 1, compat.warnings
    assert ".parquet is never read (1 unit(s) left over)" in never[0]
    assert never[0].startswith('t2i_pretrain: compat="bagel" splits as the reference')


def test_compat_split_over_ranks_and_the_main_process(tmp_path, tokenizer):
    config = dataclasses.replace(seven_files(tmp_path), compat="bagel")
    report = validate_config(config, world_size=2, num_workers=0, tokenizer=tokenizer)
    assert report.groups["t2i_pretrain"].units_per_worker == [[3], [3]]
    assert len([w for w in report.warnings if "is never read" in w]) == 1
    whole = validate_config(config, world_size=1, num_workers=7, tokenizer=tokenizer)
    assert whole.groups["t2i_pretrain"].units_per_worker == [[1] * 7]
    assert not [w for w in whole.warnings if "never read" in w or "more often" in w]


def test_a_file_read_more_often_than_the_others_is_named():
    units = ["a", "b", "c", "a", "b"]  # num_used_data repeats a and b
    read = collections.Counter(range(5))
    notes = file_warnings("g", units, read, str)
    assert [n.split(": ", 2)[2] for n in notes] == [
        "a is read 2 times, more often than other files (1 time)",
        "b is read 2 times, more often than other files (1 time)",
    ]
    assert file_warnings("g", units[:3], collections.Counter(range(3)), str) == []


def test_a_file_read_in_part_is_named_and_not_compared():
    units = [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    notes = file_warnings("g", units, collections.Counter([0, 1, 2]), lambda unit: unit[0])
    assert len(notes) == 1 and notes[0].endswith("b is read in part (1 of its 2 units)")
