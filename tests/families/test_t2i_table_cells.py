"""One odd table cell read in place never ends the pass: an image struct whose `bytes` holds
text, a double or a huge int, and a path cell naming a URL or an unknown scheme, are counted,
named skips; a whole column of the wrong type is a `ConfigError` at the start."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bagel_data.errors import ConfigError, SkipLog, SkipReason
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.sources.table_cells import CellError, image_cell, resolve_columns
from helpers.prepare_inputs import image_bytes

TRANSFORM = ImageTransform(32, 16, 16)
HF_IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _dataset(folder, tokenizer, files: int = 1, **kwargs) -> T2IIterableDataset:
    return T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(folder)], [files], num_workers=1,
                              image_column="image", caption_column="text", **kwargs)  # fmt: skip


def _one_pass(dataset) -> tuple[list[str], SkipLog]:
    log = SkipLog("t2i")
    texts = [dataset.tokenizer.decode(sample["text_ids_list"][0]) for _, sample in dataset.iter_pass(log)]
    return texts, log


def _good(path, count: int = 2) -> None:
    images = [{"bytes": image_bytes(i + 1, "PNG"), "path": None} for i in range(count)]
    table = pa.table({"image": pa.array(images, HF_IMAGE), "text": [f"good {i}" for i in range(count)]})
    pq.write_table(table, path)


@pytest.mark.parametrize(
    "kind, value",
    [(pa.string(), "not bytes"), (pa.float64(), 1.5), (pa.int64(), 2**40)],
    ids=["string", "double", "int64"],
)
def test_an_odd_bytes_field_in_a_later_file_is_a_counted_skip(tmp_path, tokenizer, kind, value):
    (tmp_path / "t").mkdir()
    _good(tmp_path / "t" / "a.parquet")  # the first file, checked at construction, is right
    odd = pa.struct([("bytes", kind), ("path", pa.string())])
    table = pa.table({"image": pa.array([{"bytes": value, "path": None}] * 2, odd), "text": ["odd 0", "odd 1"]})
    pq.write_table(table, tmp_path / "t" / "b.parquet")
    texts, log = _one_pass(_dataset(tmp_path / "t", tokenizer, 2))
    assert sorted(texts) == ["good 0", "good 1"]
    assert dict(log.counts) == {SkipReason.SCHEMA.value: 2}
    assert f"bytes field holds {type(value).__name__}" in log.examples[SkipReason.SCHEMA.value]


@pytest.mark.parametrize("kind", [pa.string(), pa.float64(), pa.int64()], ids=["string", "double", "int64"])
def test_a_whole_column_of_the_wrong_struct_type_is_a_config_error_at_the_start(tmp_path, tokenizer, kind):
    (tmp_path / "t").mkdir()
    odd = pa.struct([("bytes", kind), ("path", pa.string())])
    value = {pa.string(): "x", pa.float64(): 1.5, pa.int64(): 7}[kind]
    table = pa.table({"image": pa.array([{"bytes": value, "path": None}], odd), "text": ["t"]})
    pq.write_table(table, tmp_path / "t" / "a.parquet")
    with pytest.raises(ConfigError, match=rf"image_column = 'image': .*is struct<bytes: {kind}.*must be binary"):
        _dataset(tmp_path / "t", tokenizer)


@pytest.mark.parametrize(
    "cell", ["file:///etc/hostname", "http://127.0.0.1:9/x.png", "s3://bucket/x.png", "nosuch://x/y.png"]
)
def test_a_path_cell_with_a_scheme_is_a_counted_skip(tmp_path, tokenizer, cell):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "0.png").write_bytes(image_bytes(1, "PNG"))
    pq.write_table(pa.table({"image": ["0.png", cell, "0.png"], "text": ["a", "b", "c"]}), tmp_path / "t" / "a.parquet")
    texts, log = _one_pass(_dataset(tmp_path / "t", tokenizer))
    assert texts == ["a", "c"]
    assert dict(log.counts) == {SkipReason.OUTSIDE_ROOT.value: 1}


def test_a_path_cell_with_an_unknown_scheme_allowed_outside_the_root_is_unreadable(tmp_path, tokenizer):
    (tmp_path / "t").mkdir()
    pq.write_table(
        pa.table({"image": ["nosuch://x/y.png", "file://"], "text": ["a", "b"]}), tmp_path / "t" / "a.parquet"
    )
    texts, log = _one_pass(_dataset(tmp_path / "t", tokenizer, allow_outside_root=True))
    assert texts == [] and dict(log.counts) == {SkipReason.IMAGE_UNREADABLE.value: 2}


@pytest.mark.parametrize(
    "value, says",
    [({"bytes": "text", "path": None}, "holds str"), ({"bytes": 1.5}, "holds float"),
     ({"bytes": 2**40, "path": "a.png"}, "holds int"), (2**40, "holds int"), (3.5, "holds float"),
     ({"bytes": None, "path": None}, "empty"), (b"", "empty"), (None, "empty")],
)  # fmt: skip
def test_image_cell_refuses_other_types_without_allocating(value, says):
    with pytest.raises(CellError, match=says):
        image_cell(value)


def test_a_struct_with_a_text_path_and_binary_bytes_is_accepted():
    schema = pa.schema([("image", HF_IMAGE), ("text", pa.string())])
    assert resolve_columns(schema, None, None, "t") == ("image", "text")
    bad_path = pa.struct([("bytes", pa.binary()), ("path", pa.int64())])
    with pytest.raises(ConfigError, match="must be binary"):
        resolve_columns(pa.schema([("image", bad_path), ("text", pa.string())]), None, None, "t")
