"""`prepare edit` and `prepare interleaved` row checks: an image list holds non-empty file
names and nothing else; a document text is a non-empty string."""

from __future__ import annotations

import pytest

from bagel_data.errors import SkipReason
from bagel_data.tools.prepare.edit import edit_row
from bagel_data.tools.prepare.interleaved import document_segments
from bagel_data.tools.prepare.report import RowDropped


@pytest.mark.parametrize("images", [[3, "b.jpg"], ["a.jpg", None], ["a.jpg", ""], ["a.jpg", ["b.jpg"]], "a.jpg"])
def test_an_image_list_with_anything_but_file_names_is_a_schema_drop(tmp_path, images):
    with pytest.raises(RowDropped) as dropped:
        edit_row({"images": images, "instructions": [["x"]]}, tmp_path)
    assert dropped.value.reason == SkipReason.SCHEMA
    assert "'images' must be a list of file names" in dropped.value.detail


@pytest.mark.parametrize("text", ["", "   \n", 3, ["a caption"]])
def test_an_interleaved_text_that_is_not_a_non_empty_string_is_a_schema_drop(tmp_path, text):
    with pytest.raises(RowDropped) as dropped:
        document_segments({"texts": ["an intro", text], "images": [None, None]}, tmp_path)
    assert dropped.value.reason == SkipReason.SCHEMA
    assert "position 1: the text must be a non-empty string" in dropped.value.detail


def _no_fix(kind, detail):
    raise AssertionError(f"unexpected repair {kind}: {detail}")


def test_a_vlm_image_without_a_human_turn_to_hold_its_tag_is_dropped(tmp_path):
    from PIL import Image

    from bagel_data.tools.prepare.vlm import fix_vlm_row

    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    row = {"image": "a.png", "conversations": [{"from": "gpt", "value": "an answer"}]}
    with pytest.raises(RowDropped) as dropped:
        fix_vlm_row(row, tmp_path, _no_fix)
    assert dropped.value.reason == SkipReason.PLACEHOLDER_MISMATCH


def test_prepare_vlm_makes_the_output_folder_with_its_parents(tmp_path):
    import json

    from PIL import Image

    from bagel_data.tools.prepare import prepare_vlm

    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    turns = [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "A square."}]
    (tmp_path / "llava.json").write_text(json.dumps([{"image": "a.png", "conversations": turns}]))
    out = tmp_path / "runs" / "today" / "sft.jsonl"
    report = prepare_vlm(tmp_path / "llava.json", out, image_root=tmp_path)
    assert report.rows_written == 1 and out.is_file()
