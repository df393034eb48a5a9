"""`prepare edit` writes parquet_info keys that BAGEL's own reader finds, and both readers
keep working after the data moves."""

from __future__ import annotations

import json
import os
import shutil

from PIL import Image

from bagel_data import ImageTransform, UnifiedEditIterableDataset
from bagel_data.tools.prepare import prepare_edit, write_parquet_info


def _prepare(tmp_path, **kwargs):
    for index, name in enumerate(["a.png", "b.png", "c.png"]):
        Image.new("RGB", (40, 32), (40 * index, 90, 200)).save(tmp_path / name)
    rows = [{"images": ["a.png", "b.png"], "instructions": [["warmer"]]}] * 3
    rows += [{"images": ["b.png", "c.png", "a.png"], "instructions": [["x"], ["y"]]}]
    (tmp_path / "edits.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = prepare_edit(tmp_path / "edits.jsonl", tmp_path / "out", rows_per_group=1, rows_per_shard=2, **kwargs)
    assert report.rows_written == 4
    return tmp_path / "out"


def reference_units(data_dir: str, parquet_info: dict) -> list[tuple[str, int]]:
    """BAGEL's edit listing: os.path.join(data_dir, name) for each listed file, looked up
    by that exact string (files without an entry are silently left out)."""
    units = []
    for name in os.listdir(data_dir):
        path = os.path.join(data_dir, name)
        if name.endswith(".parquet") and path in parquet_info:
            units.extend((path, group) for group in range(parquet_info[path]["num_row_groups"]))
    return units


def _ours(data_dir, info) -> list:
    transform = ImageTransform(64, 32, 16)
    dataset = UnifiedEditIterableDataset(
        "edit", transform, None, ImageTransform(56, 28, 14), [str(data_dir)], [2], info, num_workers=1
    )
    return dataset.data_paths


def test_keys_are_the_paths_bagel_joins(tmp_path):
    out = _prepare(tmp_path)
    info = json.loads((out / "parquet_info.json").read_text())
    data_dir = os.path.abspath(out)  # what dataset_info's data_dir says
    assert len(reference_units(data_dir, info)) == 4  # two files x two row groups, all found
    assert sorted(_ours(data_dir, info)) == sorted(reference_units(data_dir, info))


def test_data_dir_option_and_moving_the_data(tmp_path):
    out = _prepare(tmp_path, data_dir="/mnt/train/edit")
    info = json.loads((out / "parquet_info.json").read_text())
    assert sorted(info) == ["/mnt/train/edit/part-00000.parquet", "/mnt/train/edit/part-00001.parquet"]
    moved = shutil.copytree(out, tmp_path / "elsewhere")
    # Ours still finds every file by its name under the new folder; BAGEL's finds none ...
    assert len(_ours(moved, info)) == 4
    assert reference_units(str(moved), info) == []
    # ... until the keys are rewritten for the new data_dir.
    write_parquet_info(moved, data_dir=str(moved))
    info = json.loads((moved / "parquet_info.json").read_text())
    assert len(reference_units(str(moved), info)) == 4
    assert len(_ours(moved, info)) == 4
