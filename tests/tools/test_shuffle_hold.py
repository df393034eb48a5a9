"""`validate`'s estimate of what the shuffle keeps open (`tools/shuffle_hold.py`): the open
row groups of one worker times the largest row group's uncompressed bytes, from the footers,
and a warning past the limit naming the setting that lowers it."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from bagel_data.tools import shuffle_hold as hold_module
from bagel_data.tools.run import build_from_run_config
from bagel_data.tools.shuffle_hold import ShuffleHold, hold_warning, shuffle_hold
from bagel_data.tools.validate import validate_config
from helpers.builders import t2i_run_config


def _noise_jpeg(seed: int, side: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG")
    return buffer.getvalue()


def _files(sizes, side: int = 24) -> list:
    """A file per size, one row group each, of noise JPEGs (their bytes do not compress)."""
    return [
        [[{"image": _noise_jpeg(f * 1000 + r, side), "captions": {"a": f"f{f} r{r}"}} for r in range(n)]]
        for f, n in enumerate(sizes)
    ]


def _row_group_bytes(folder) -> list[int]:
    return [pq.ParquetFile(path).metadata.row_group(0).total_byte_size for path in sorted(folder.glob("*.parquet"))]


def _family(config, tokenizer):
    return build_from_run_config(config, tokenizer=tokenizer).dataset.grouped_datasets[0]


@pytest.mark.parametrize(("window", "open_pieces"), [(1024, 8), (256, 2), (255, 1)])
def test_the_estimate_is_the_open_row_groups_times_the_largest(tmp_path, tokenizer, window, open_pieces):
    folder = tmp_path / "t2i"
    config = t2i_run_config(folder, _files([3, 5, 2]), budget=4096, num_used_data=3,
                            packing={"shuffle_buffer_size": window})  # fmt: skip
    hold = shuffle_hold(_family(config, tokenizer))
    assert hold is not None and hold.files_looked_at == 3 and hold.open_pieces == open_pieces
    assert hold.largest_row_group_mb == max(_row_group_bytes(folder)) / 2**20
    assert hold.per_worker_mb == open_pieces * hold.largest_row_group_mb


def test_validate_reports_it_per_worker(tmp_path, tokenizer):
    folder = tmp_path / "t2i"
    config = t2i_run_config(folder, _files([40, 30], side=96), budget=4096, num_used_data=2)
    report = validate_config(config, num_workers=2, tokenizer=tokenizer)
    expected = round(8 * max(_row_group_bytes(folder)) / 2**20, 1)
    assert report.groups["t2i_pretrain"].shuffle_hold_mb == expected > 0.5
    assert not [w for w in report.warnings if "row groups open" in w]


def test_no_estimate_without_a_shuffle_of_row_groups(tmp_path, tokenizer):
    config = t2i_run_config(tmp_path / "t2i", _files([3, 2]), budget=4096, num_used_data=2,
                            packing={"shuffle_buffer_size": 0})  # fmt: skip
    assert shuffle_hold(_family(config, tokenizer)) is None
    compat = dataclasses.replace(config, packing={**config.packing, "shuffle_buffer_size": 1024}, compat="bagel")
    assert shuffle_hold(_family(compat, tokenizer)) is None


def test_validate_warns_past_the_limit_with_the_fix(tmp_path, tokenizer, monkeypatch):
    monkeypatch.setattr(hold_module, "HOLD_WARNING_MB", 0.001)
    config = t2i_run_config(tmp_path / "t2i", _files([3, 2]), budget=4096, num_used_data=2)
    report = validate_config(config, num_workers=3, tokenizer=tokenizer)
    (warning,) = [w for w in report.warnings if "row groups open" in w]
    assert "up to 8 row groups open per DataLoader worker" in warning and "for 3 worker(s)" in warning
    assert "shuffle_buffer_size (256 keeps 2 open" in warning


def test_the_warning_starts_just_past_the_limit():
    at_limit = ShuffleHold(8, hold_module.HOLD_WARNING_MB / 8, 1)
    assert hold_warning("g", at_limit, 1) == []
    past = dataclasses.replace(at_limit, largest_row_group_mb=at_limit.largest_row_group_mb + 0.01)
    assert hold_warning("g", past, 1) and hold_warning("g", None, 1) == []


def test_the_largest_row_group_of_the_files_looked_at_stands_for_all(tmp_path, tokenizer, monkeypatch):
    """Files past LOOKED_AT are sampled evenly: with 1 looked at, only the first is read."""
    folder = tmp_path / "t2i"
    config = t2i_run_config(folder, _files([2, 6]), budget=4096, num_used_data=2)
    monkeypatch.setattr(hold_module, "LOOKED_AT", 1)
    hold = shuffle_hold(_family(config, tokenizer))
    first, largest = _row_group_bytes(folder)[0], max(_row_group_bytes(folder))
    assert hold is not None and hold.files_looked_at == 1
    assert hold.largest_row_group_mb == first / 2**20 < largest / 2**20
