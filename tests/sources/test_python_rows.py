"""A row group's rows as Python values, a slice at a time (`sources/parquet.python_rows`):
the same rows as converting whole columns, across slice edges, and a slice Python cannot
hold (invalid UTF-8 that Arrow reads) counted, not ending the pass."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bagel_data import ImageTransform, T2IIterableDataset
from bagel_data.errors import SkipLog
from bagel_data.sources.parquet import READ_ROWS, python_rows
from helpers.builders import solid_jpeg


def _table(rows: int) -> pa.Table:
    return pa.table({"n": list(range(rows)), "s": [f"r{i}" for i in range(rows)]})


def _bad_utf8(values: list[bytes]) -> pa.Array:
    """A string column holding `values` as they are (Arrow does not check them)."""
    raw = pa.array(values, pa.binary())
    return pa.Array.from_buffers(pa.string(), len(values), raw.buffers())


@settings(deadline=None)  # the full suite runs beside other work
@given(
    rows=st.sampled_from([0, 1, READ_ROWS - 1, READ_ROWS, READ_ROWS + 1, 3 * READ_ROWS + 5]),
    first=st.integers(0, 3 * READ_ROWS + 6),
    stop=st.none() | st.integers(0, 3 * READ_ROWS + 6),
)
def test_the_rows_are_those_of_whole_columns_across_slice_edges(rows, first, stop):
    table = _table(rows)
    whole = table.to_pylist()
    end = rows if stop is None else min(stop, rows)
    want = [(row, whole[row]) for row in range(first, end)]
    assert list(python_rows(table, first, stop)) == want


def test_a_slice_python_cannot_hold_is_handed_on_and_the_rest_read():
    rows = 2 * READ_ROWS + 3
    values = [f"r{i}".encode() for i in range(rows)]
    values[READ_ROWS + 7] = b"\xff\xfe"  # in the second slice
    table = pa.table({"n": list(range(rows)), "s": _bad_utf8(values)})
    lost: list = []
    got = [row for row, _ in python_rows(table, 0, None, lambda start, count, exc: lost.append((start, count)))]
    assert lost == [(READ_ROWS, READ_ROWS)]
    assert got == [*range(READ_ROWS), *range(2 * READ_ROWS, rows)]
    with pytest.raises(UnicodeDecodeError):
        list(python_rows(table))


def test_a_t2i_row_group_with_an_undecodable_caption_counts_its_slice(tmp_path, tokenizer):
    """Before, a T2I row group lost this way was counted whole; the edit and parquet-standard
    families raised. Now the slice's rows are counted and the other row group is read."""
    image = solid_jpeg(64, 48)
    good = json.dumps({"c": "a red square"}).encode()
    captions = _bad_utf8([good, b"\xff\xfe", good, good])
    table = pa.table({"image": pa.array([image] * 4, pa.binary()), "captions": captions})
    pq.write_table(table, tmp_path / "part-000.parquet", row_group_size=2)
    dataset = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(tmp_path)], [1], num_workers=1)
    log = SkipLog("t2i", strict=False)
    samples = [sample for _, sample in dataset.iter_pass(log)]
    assert len(samples) == 2
    assert log.as_dict() == {"row_group_unreadable": 2}
    assert "row group 0, rows 0-1" in log.examples["row_group_unreadable"]
