"""`validate` finds, before the run, what would stop it: a worker whose units are all empty,
and a group where no sample fits the per-sample budget."""

from __future__ import annotations

from bagel_data.tools.run import RunConfig
from bagel_data.tools.validate import validate_config
from helpers.builders import solid_jpeg, write_t2i
from test_no_hang import zero_row_parquet

ROW = {"image": solid_jpeg(64, 48), "captions": {"c": "a red square"}}
GROUP = {
    "dataset_names": ["t2i"],
    "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32},
    "is_mandatory": False,
    "num_used_data": [2],
    "weight": 1,
}
PACKING = {"expected_num_tokens": 60, "max_num_tokens": 80, "max_num_tokens_per_sample": 70}


def config(folder, **packing) -> RunConfig:
    info = {"t2i_pretrain": {"t2i": {"data_dir": str(folder), "num_files": 2, "num_total_samples": 3}}}
    return RunConfig({"t2i_pretrain": GROUP}, info, dict(PACKING, **packing))


def test_validate_names_a_worker_with_only_empty_units(tmp_path):
    write_t2i(tmp_path, [[[ROW] * 3]], names=["a-good.parquet"])
    zero_row_parquet(tmp_path / "b-empty.parquet")
    report = validate_config(config(tmp_path), world_size=1, num_workers=2)
    assert not report.ok
    stuck = [error for error in report.errors if "only empty units" in error]
    assert len(stuck) == 1 and "b-empty.parquet" in stuck[0]
    assert report.groups["t2i_pretrain"].empty_units[0].endswith("b-empty.parquet")
    # One worker reading both files makes progress: a warning, not an error.
    report = validate_config(config(tmp_path), world_size=1, num_workers=1)
    assert not any("only empty units" in error for error in report.errors)
    assert any("hold no rows" in warning for warning in report.warnings)


def test_validate_says_when_no_sample_fits_the_budget(tmp_path):
    write_t2i(tmp_path, [[[ROW] * 3], [[ROW] * 2]])
    report = validate_config(config(tmp_path, max_num_tokens_per_sample=2), world_size=1, num_workers=1)
    assert any("every sample is over max_num_tokens_per_sample=2" in error for error in report.errors)
    report = validate_config(config(tmp_path), world_size=1, num_workers=1)
    assert report.ok, report.errors
