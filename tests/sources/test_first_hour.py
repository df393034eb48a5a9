"""What a user meets in the first hour with SFT data: a LLaVA `.json` array given as
`jsonl_path` reads in place as JSONL does; a `num_used_data` larger than a JSONL file and a
tokenizer folder without a tokenizer are each one error naming what was found and the fix,
never "unexpected error"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bagel_data.cli.main import app
from bagel_data.families.vlm import SftJSONLIterableDataset
from bagel_data.media.images import ImageTransform
from helpers.builders import png_bytes, write_vlm

runner = CliRunner()
TRANSFORM = ImageTransform(56, 14, 14)


@pytest.fixture
def unit_walk(monkeypatch):
    """The walk by whole units on local files too: files on an object store are walked by
    units (families/unit_plan.py, `walks_rows`), and these tests hold the two to the same
    stream (or pin the unit walk's own message)."""
    from bagel_data.families.unit_plan import UnitPlan

    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)


def _row(i: int) -> dict:
    return {"id": str(i), "image": f"{i}.png", "conversations": [
        {"from": "human", "value": f"<image>\nWhat colour is picture {i}?"},
        {"from": "gpt", "value": f"Picture {i} is a solid colour."},
    ]}  # fmt: skip


def _vlm(path: str, images: str, tokenizer, **kwargs):
    return SftJSONLIterableDataset("vlm", TRANSFORM, tokenizer, None, [path], [images], [kwargs.pop("used", 3)],
                                   num_workers=1, **kwargs)  # fmt: skip


def _first_pass(dataset) -> list[dict]:
    samples = []
    for cursor, sample in dataset.iter_samples():
        if cursor[0] > 0:
            return samples
        samples.append(sample)
    raise AssertionError("unreachable")


def test_a_llava_json_array_reads_in_place_as_its_jsonl(tmp_path, tokenizer):
    rows = [_row(i) for i in range(3)]
    jsonl, images = write_vlm(tmp_path, rows, {f"{i}.png": png_bytes(28, 28, (40 * i, 90, 10)) for i in range(3)})
    array = tmp_path / "llava.json"
    array.write_text(json.dumps(rows, indent=2), encoding="utf-8")  # as LLaVA ships it: one array, over many lines
    ours, theirs = _vlm(str(array), images, tokenizer), _vlm(jsonl, images, tokenizer)
    mine, copy = _first_pass(ours), _first_pass(theirs)
    assert [s["text_ids_list"] for s in mine] == [s["text_ids_list"] for s in copy] and len(mine) == 3
    # A row is named by the array's file and its element, not by the copy read.
    assert ours.data_paths.location(2) == f"{array}, element 2"


def _vlm_run(tmp_path: Path, used: int) -> Path:
    jsonl, images = write_vlm(tmp_path, [_row(0)], {"0.png": png_bytes(28, 28)})
    group = {"dataset_names": ["sft"], "num_used_data": [used], "weight": 1,
             "image_transform_args": {"image_stride": 14, "max_image_size": 56, "min_image_size": 14}}  # fmt: skip
    info = {"vlm_sft": {"sft": {"jsonl_path": jsonl, "data_dir": images}}}
    packing = {"expected_num_tokens": 256, "max_num_tokens": 512, "max_num_tokens_per_sample": 256,
               "prefer_buffer_before": 256}  # fmt: skip
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"grouped_datasets": {"vlm_sft": group}, "dataset_info": info, "packing": packing}))
    return path


def test_num_used_data_past_a_one_line_jsonl_names_the_lines_and_the_fix(tmp_path, unit_walk):
    result = runner.invoke(app, ["run", str(_vlm_run(tmp_path, 16)), "--batches", "1", "--num-workers", "2"])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert "vlm_sft.num_used_data = [16]" in output  # what the user wrote, not the line count
    assert "give 1 line(s) in all" in output and "never repeated" in output and "--num-workers 1" in output
    assert "parquet" not in output


def test_a_tokenizer_folder_without_a_tokenizer_is_a_named_mistake(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    args = ["run", str(_vlm_run(tmp_path, 1)), "--batches", "1", "--num-workers", "0", "--tokenizer", str(folder)]
    result = runner.invoke(app, args)
    output = " ".join(result.output.split())
    assert result.exit_code == 2 and "unexpected error" not in output, output
    assert "holds no tokenizer.json (it has: config.json)" in output and "--tokenizer" in output
