"""`tools/prepare/common.py` on its own: a JSONL manifest's first line may carry a byte-order
mark; sidecar captions come from `.txt` lines and a `.json`'s caption keys only, and a
`.json` without one drops its row only when nothing else gave a caption."""

from __future__ import annotations

import json

import pytest

from bagel_data.tools.prepare.common import RowDropped, manifest_rows, sidecar_captions


def test_a_jsonl_manifest_may_start_with_a_byte_order_mark(tmp_path):
    manifest = tmp_path / "rows.jsonl"
    manifest.write_bytes(b"\xef\xbb\xbf" + b'{"path": "a.jpg"}\n{"path": "b.jpg"}\n')
    assert manifest_rows(manifest) == [("rows.jsonl:1", {"path": "a.jpg"}), ("rows.jsonl:2", {"path": "b.jpg"})]


def test_a_byte_order_mark_past_the_first_line_is_that_rows_error(tmp_path):
    manifest = tmp_path / "rows.jsonl"
    manifest.write_bytes(b'{"path": "a.jpg"}\n\xef\xbb\xbf{"path": "b.jpg"}\n')
    rows = manifest_rows(manifest)
    assert rows[0] == ("rows.jsonl:1", {"path": "a.jpg"})
    assert isinstance(rows[1][1], RowDropped)


def test_txt_captions_keep_a_row_whose_json_has_no_caption_key():
    meta = json.dumps({"url": "http://x/1.jpg", "width": 640, "status": "success"})
    assert sidecar_captions("a red fox\n\nin snow\n", meta) == (["a red fox", "in snow"], ".txt")


def test_a_json_without_a_caption_key_and_no_txt_drops_the_row_naming_eight_keys():
    meta = json.dumps({f"k{i:02d}": i for i in range(12)})
    with pytest.raises(RowDropped) as dropped:
        sidecar_captions(None, meta)
    listed = dropped.value.detail.split("its keys: ")[1]
    assert listed == ", ".join(f"k{i:02d}" for i in range(8))


def test_json_caption_keys_add_to_txt_and_say_where_they_came_from():
    meta = json.dumps({"short": "logo", "caption": "a cat", "caption_2": "a small cat"})
    assert sidecar_captions("from txt", meta) == (["from txt", "a cat", "a small cat"], ".txt + .json caption")
