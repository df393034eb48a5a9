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
