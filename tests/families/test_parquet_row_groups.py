"""The parquet row-group unit kind (`families/unit_kinds.py`) and the listing it records
(`families/parquet_listing.py`): which (file, row group) units a group's folders give, what
is asked of each file and how often, the span and row count a unit stands for, and what the
listing records for the reference check, each at its limits."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bagel_data.families.parquet_listing import ParquetListing
from bagel_data.families.unit_kinds import ParquetRowGroups, footer_rows


def _file(path, groups: list[int]) -> str:
    """A parquet file whose row groups hold `groups` rows each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, pa.schema([("x", pa.int64())])) as writer:
        for size in groups:
            writer.write_table(pa.table({"x": pa.array(range(size), pa.int64())}))
    return str(path)


def test_every_row_group_of_every_file_is_a_unit_in_order(tmp_path):
    a, b = _file(tmp_path / "d" / "a.parquet", [2, 3, 1]), _file(tmp_path / "d" / "b.parquet", [4])
    kind = ParquetRowGroups()
    got, listed = kind.list_units(
        [str(tmp_path / "d")], [2], "sorted", lambda path, folder: len(footer_rows({}, path) or ())
    )
    assert got == [(a, 0), (a, 1), (a, 2), (b, 0)]
    assert kind.listing is not None and kind.listing.files == (a, b)
    assert set(listed) == {a, b}


def test_a_repeated_file_is_asked_once_and_a_refused_one_each_time(tmp_path):
    a, b = _file(tmp_path / "d" / "a.parquet", [1, 1]), _file(tmp_path / "d" / "b.parquet", [1])
    asked: list[str] = []

    def count(path, folder):
        asked.append(path)
        assert folder == str(tmp_path / "d")
        return None if path == b else 2

    kind = ParquetRowGroups()
    got, _ = kind.list_units([str(tmp_path / "d")], [5], "sorted", count)  # a, b, a, b, a
    assert got == [(a, 0), (a, 1)] * 3
    assert asked == [a, b, b]  # a's count kept; None leaves b out and is asked again
    assert kind.listing.files == (a, b, a, b, a)  # type: ignore[union-attr]


def test_a_file_of_no_row_groups_gives_no_unit(tmp_path):
    a = _file(tmp_path / "d" / "a.parquet", [1])
    assert ParquetRowGroups().list_units([str(tmp_path / "d")], [1], "sorted", lambda path, folder: 0)[0] == []
    assert ParquetRowGroups().list_units([str(tmp_path / "d")], [1], "sorted", lambda path, folder: 1)[0] == [(a, 0)]


def test_footer_rows_reads_a_file_once_and_an_unreadable_one_is_none(tmp_path, monkeypatch):
    from bagel_data.families import unit_kinds

    a = _file(tmp_path / "a.parquet", [3, 0, 5])
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    opened = []
    real = unit_kinds.ParquetReader
    monkeypatch.setattr(unit_kinds, "ParquetReader", lambda path: opened.append(path) or real(path))
    cache: dict = {}
    assert footer_rows(cache, a) == (3, 0, 5) and footer_rows(cache, a) == (3, 0, 5)
    assert footer_rows(cache, str(tmp_path / "bad.parquet")) is None
    assert footer_rows(cache, str(tmp_path / "bad.parquet")) is None
    assert opened == [a, str(tmp_path / "bad.parquet")]


def test_a_unit_spans_its_one_row_group_and_counts_its_rows(tmp_path):
    a = _file(tmp_path / "a.parquet", [3, 0, 5])
    kind = ParquetRowGroups()
    units = [(a, 0), (a, 2), (a, 3)]
    assert kind.span(units[1]).path == a and kind.span(units[1]).row_group == 2
    assert kind.extent(units[0], ()) == ("row", 3, f"{a}, row group 0")
    assert kind.extent(units[1], ()) == ("row", 5, f"{a}, row group 2")
    assert kind.extent(units[2], ()) is None  # row group 3 of 3: a stale listing, said when read
    assert kind.depth == 1


def test_the_listing_counts_each_folder_s_own_files_only(tmp_path):
    top = [_file(tmp_path / "d" / f"{i}.parquet", [1]) for i in range(3)]
    sub = [_file(tmp_path / "d" / "sub" / f"{i}.parquet", [1]) for i in range(2)]
    other = _file(tmp_path / "dd" / "x.parquet", [1])  # a folder whose name extends d's
    listed = {path: (1, 1) for path in [*top, *sub, other]}
    folders = [str(tmp_path / "d"), str(tmp_path / "d" / "sub")]
    listing = ParquetListing.of(folders, [3, 2], "sorted", [*top, *sub], listed)
    assert listing.folder_sizes == (3, 2)


def test_the_folder_sizes_count_the_files_listed_not_the_files_taken(tmp_path):
    """A folder's size is what it holds: `num_used_data` may take fewer files than that, or
    repeat them, and neither changes it (the whole-copies rule divides by it)."""
    files = [_file(tmp_path / "d" / f"{i}.parquet", [1]) for i in range(3)]
    listed = {path: (1, 1) for path in files}
    assert ParquetListing.of([str(tmp_path / "d")], [1], "sorted", files[:1], listed).folder_sizes == (3,)
    assert ParquetListing.of([str(tmp_path / "d")], [5], "sorted", [*files, *files[:2]], listed).folder_sizes == (3,)


@pytest.mark.parametrize(
    "order, used, sizes, free",
    [("filesystem", [1], [3], True), ("sorted", [3], [3], True), ("sorted", [6], [3], True),
     ("sorted", [2], [3], False), ("sorted", [4], [3], False), ("sorted", [3, 1], [3, 2], False),
     ("sorted", [1], [0], False)],
)  # fmt: skip
def test_the_order_is_free_only_when_whole_copies_of_every_folder_are_taken(order, used, sizes, free):
    listing = ParquetListing(tuple(f"d{i}" for i in range(len(used))), tuple(used), order, (), tuple(sizes))
    assert listing.order_free() is free


def test_the_reference_mismatch_names_the_files_read_a_different_number_of_times(tmp_path, monkeypatch):
    from bagel_data.families import parquet_listing

    files = [_file(tmp_path / "d" / f"{name}.parquet", [1]) for name in "abc"]
    listing = ParquetListing((str(tmp_path / "d"),), (2,), "sorted", (files[0], files[1]), (3,))
    monkeypatch.setattr(parquet_listing, "parquet_data_files", lambda *a, **k: ([files[0], files[1]], {}))
    assert listing.reference_mismatch is None  # the same files, in any order
    monkeypatch.setattr(parquet_listing, "parquet_data_files", lambda *a, **k: ([files[2], files[0]], {}))
    listing = ParquetListing((str(tmp_path / "d"),), (2,), "sorted", (files[0], files[1]), (3,))  # listed once each
    said = listing.reference_mismatch
    assert said is not None and f"{files[1]} read 1x here, 0x there" in said and f"{files[2]} read 0x here, 1x" in said
    assert files[0] not in said.split("(", 1)[1].replace(f"{files[1]}", "").replace(f"{files[2]}", "")


def test_the_same_files_taken_a_different_number_of_times_are_a_mismatch(tmp_path, monkeypatch):
    from bagel_data.families import parquet_listing

    a, b = (_file(tmp_path / "d" / f"{name}.parquet", [1]) for name in "ab")
    listing = ParquetListing((str(tmp_path / "d"),), (3,), "sorted", (a, b, a), (2,))
    monkeypatch.setattr(parquet_listing, "parquet_data_files", lambda *args, **kwargs: ([b, a, b], {}))
    said = listing.reference_mismatch
    assert said is not None and f"{a} read 2x here, 1x there" in said and f"{b} read 1x here, 2x there" in said


def test_a_row_group_unit_reads_ahead_its_own_row_group_only(tmp_path):
    """The read-ahead of a (file, row group) unit fetches that row group, never the next:
    the next one is another unit, maybe another worker's."""
    a = _file(tmp_path / "a.parquet", [2, 2, 2])
    units = [(a, 1), (a, 2)]
    source = ParquetRowGroups().read_source(lambda unit_id: units[unit_id], lambda names: ["x"])
    assert source.span(0, ()) == (a, 1, 2) and source.span(1, ()) == (a, 2, 3)


def test_the_reference_s_files_are_listed_in_its_own_order_once(tmp_path, monkeypatch):
    """The check lists the folders the reference's way (the filesystem's order), whatever
    this listing's order, and only once however often it is asked."""
    from bagel_data.families import parquet_listing

    a, b, c = (_file(tmp_path / "d" / f"{name}.parquet", [1]) for name in "abc")
    asked: list[str] = []

    def listing_of(data_dirs, num_used, file_order):
        asked.append(file_order)
        return ([c, b] if file_order == "filesystem" else [a, b]), {}

    monkeypatch.setattr(parquet_listing, "parquet_data_files", listing_of)
    listing = ParquetListing((str(tmp_path / "d"),), (2,), "sorted", (a, b), (3,))
    said = listing.reference_mismatch
    assert said is not None and f"{a} read 1x here, 0x there" in said
    assert listing.reference_mismatch == said and asked == ["filesystem"]


def test_row_group_units_record_each_file_once_as_an_input():
    assert ParquetRowGroups().input_paths([("b.parquet", 0), ("a.parquet", 1), ("b.parquet", 1)]) == [
        "a.parquet",
        "b.parquet",
    ]


def test_each_file_s_row_groups_are_asked_under_its_own_folder(tmp_path):
    """Several data_dirs: a file's count (its parquet_info entry, relative to its folder) is
    asked with the folder it was listed from."""
    a, b = _file(tmp_path / "d1" / "a.parquet", [1]), _file(tmp_path / "d2" / "b.parquet", [1, 1])
    asked: list[tuple[str, str]] = []
    kind = ParquetRowGroups()
    folders = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    got, _ = kind.list_units(folders, [1, 1], "sorted", lambda path, folder: asked.append((path, folder)) or 1)
    assert asked == [(a, folders[0]), (b, folders[1])] and got == [(a, 0), (b, 0)]


def test_a_jsonl_group_s_too_few_error_names_num_used_data_as_configured():
    import types

    from bagel_data.families.unit_kinds import JsonlLines

    index = types.SimpleNamespace(shown_paths=[None], paths=["x.jsonl"])
    assert JsonlLines(index, [10]).too_few("g", 3, 4, 1, 4)[:2] == ("g.num_used_data", [10])  # type: ignore[arg-type]
    assert JsonlLines(index).too_few("g", 3, 4, 1, 4)[:2] == ("g.num_used_data", 3)  # type: ignore[arg-type]
