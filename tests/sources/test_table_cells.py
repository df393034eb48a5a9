"""`sources/table_cells.py`: which columns of a user's table hold images and captions, and
what a cell of each means."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bagel_data.errors import ConfigError
from bagel_data.sources.table_cells import CellError, caption_cell, image_cell, resolve_columns

HF_IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def test_the_usual_names_are_found_without_being_named():
    schema = pa.schema([("id", pa.int64()), ("text", pa.string()), ("image", HF_IMAGE)])
    assert resolve_columns(schema, None, None, "t.parquet") == ("image", "text")
    # img2dataset's parquet names them by extension.
    schema = pa.schema([("jpg", pa.binary()), ("txt", pa.string())])
    assert resolve_columns(schema, None, None, "t.parquet") == ("jpg", "txt")


def test_named_columns_win_over_the_usual_names():
    schema = pa.schema([("image", pa.binary()), ("text", pa.string()), ("photo", pa.string()), ("alt", pa.string())])
    assert resolve_columns(schema, "photo", "alt", "t.parquet") == ("photo", "alt")


def test_a_missing_column_is_one_error_naming_the_columns_found():
    schema = pa.schema([("image", HF_IMAGE), ("label", pa.int64())])
    with pytest.raises(ConfigError) as caught:
        resolve_columns(schema, None, None, "t.parquet")
    assert caught.value.key == "caption_column"
    assert "image (struct<bytes: binary, path: string>), label (int64)" in str(caption := caught.value)
    assert "t.parquet" in str(caption)
    with pytest.raises(ConfigError, match="no column 'prompt'"):
        resolve_columns(pa.schema([("image", HF_IMAGE), ("text", pa.string())]), None, "prompt", "t.parquet")


@pytest.mark.parametrize(
    ("image", "caption", "bad_key"),
    [
        (pa.int64(), pa.string(), "image_column"),
        (pa.struct([("path", pa.string())]), pa.string(), "image_column"),  # a struct without bytes
        (pa.binary(), pa.int32(), "caption_column"),
        (pa.binary(), pa.list_(pa.int32()), "caption_column"),
    ],
)
def test_a_column_of_the_wrong_type_is_refused(image, caption, bad_key):
    schema = pa.schema([("image", image), ("text", caption)])
    with pytest.raises(ConfigError) as caught:
        resolve_columns(schema, None, None, "t.parquet")
    assert caught.value.key == bad_key and "its columns: image" in str(caught.value)


@pytest.mark.parametrize(
    ("image", "caption"),
    [(pa.large_binary(), pa.large_string()), (pa.string(), pa.list_(pa.string())), (HF_IMAGE, pa.large_string())],
)
def test_every_documented_cell_type_is_taken(image, caption):
    assert resolve_columns(pa.schema([("image", image), ("text", caption)]), None, None, "t") == ("image", "text")


def test_image_cells():
    assert image_cell(b"\x89PNG") == b"\x89PNG"
    assert image_cell({"bytes": b"\xff\xd8", "path": "a.jpg"}) == b"\xff\xd8"  # embedded bytes win
    assert image_cell({"bytes": None, "path": "imgs/a.jpg"}) == "imgs/a.jpg"
    assert image_cell("imgs/b.png") == "imgs/b.png"
    for empty in (None, b"", "", {"bytes": None, "path": None}):
        with pytest.raises(CellError):
            image_cell(empty)


def test_caption_cells():
    assert caption_cell("  a cat  ") == ["a cat"]
    assert caption_cell(["a cat", " ", "a dog"]) == ["a cat", "a dog"]
    assert caption_cell('{"caption_1": "a cat", "caption_2": "a dog"}') == ["a cat", "a dog"]  # BAGEL's own
    assert caption_cell("{not json} in braces") == ["{not json} in braces"]
    assert caption_cell(None) == []
    with pytest.raises(CellError):
        caption_cell(["a cat", 3])
    with pytest.raises(CellError):
        caption_cell(3)


@given(st.one_of(st.text(), st.lists(st.one_of(st.text(), st.none())), st.none()))
def test_any_text_cell_gives_stripped_non_empty_captions(value):
    captions = caption_cell(value)
    assert all(text == text.strip() and text for text in captions)


def test_column_types_an_image_or_caption_column_may_have():
    from bagel_data.sources.table_cells import _caption_type_ok, _image_type_ok

    assert _image_type_ok(pa.struct([("bytes", pa.null()), ("path", pa.string())]))  # paths only
    assert _image_type_ok(pa.struct([("bytes", pa.binary())]))  # no path field
    assert not _image_type_ok(pa.struct([("bytes", pa.string())]))
    assert _caption_type_ok(pa.list_(pa.string())) and not _caption_type_ok(pa.list_(pa.int64()))


def test_a_named_column_the_table_lacks_is_a_config_error_naming_it():
    schema = pa.schema([("image", pa.binary()), ("text", pa.string())])
    assert resolve_columns(schema, None, None, "t.parquet") == ("image", "text")
    with pytest.raises(ConfigError, match="has no column 'caption'"):
        resolve_columns(schema, None, "caption", "t.parquet")


def test_empty_cells_are_refused_and_blank_captions_left_out():
    assert image_cell({"bytes": b"", "path": "a.jpg"}) == "a.jpg"  # empty bytes: the path
    with pytest.raises(CellError, match="empty"):
        image_cell("")
    assert caption_cell(["a", " ", "", " b "]) == ["a", "b"]
    assert caption_cell(' {"caption_1": "x", "caption_2": "y"}') == ["x", "y"]  # JSON after a space


def test_a_table_lacking_bagels_caption_column_is_named_by_it(tmp_path):
    import pyarrow.parquet as pq

    from bagel_data.sources.table_cells import check_bagel_columns

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"image": [b"x"], "other": ["y"]}), path)
    with pytest.raises(ConfigError) as caught:
        check_bagel_columns([str(path)], ["image", "captions"])
    assert caught.value.key == "caption_column"
