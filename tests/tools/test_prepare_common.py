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


def test_jsonl_shards_keep_text_as_utf8_not_escapes():
    """The JSONL reader orders lines by their bytes: `\\u00e9` and `é` would sort apart."""
    from bagel_data.tools.prepare.shard_jobs import jsonl_bytes

    assert jsonl_bytes([{"t": "café ☕"}, {"t": "x"}]) == '{"t": "café ☕"}\n{"t": "x"}\n'.encode()


def test_an_output_folder_is_made_with_its_parents(tmp_path):
    from bagel_data.tools.prepare.shards import prepare_out_dir

    made = prepare_out_dir(tmp_path / "runs" / "today" / "t2i", overwrite=False)
    assert made.is_dir() and made == tmp_path / "runs" / "today" / "t2i"


def test_a_jpeg_reencode_keeps_quality_95():
    import io

    import numpy as np
    from PIL import Image

    from bagel_data.tools.prepare.stored_images import stored_image

    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    png = io.BytesIO()
    Image.fromarray(pixels).save(png, format="PNG")
    expected = io.BytesIO()
    Image.fromarray(pixels).save(expected, format="JPEG", quality=95)
    assert stored_image(png.getvalue(), "noise.png", reencode="JPEG") == expected.getvalue()


@pytest.mark.parametrize(("size", "expected"), [((400, 2), (100, 1)), ((2, 400), (1, 100))])
def test_max_side_keeps_a_thin_side_at_one_pixel(size, expected):
    import io

    from PIL import Image

    from bagel_data.tools.prepare.stored_images import stored_image

    png = io.BytesIO()
    Image.new("RGB", size, (10, 200, 30)).save(png, format="PNG")
    stored = stored_image(png.getvalue(), "thin.png", max_side=100)
    with Image.open(io.BytesIO(stored)) as image:
        assert image.size == expected


def test_t2i_captions_are_numbered_once_each_and_kept_as_utf8():
    from bagel_data.tools.prepare.t2i import numbered_captions

    assert numbered_captions(["café", "a cat", "café"]) == '{"caption_1": "café", "caption_2": "a cat"}'
    with pytest.raises(RowDropped, match="no caption text"):
        numbered_captions([])
