"""sources/parquet.py: which listing order a group gets, and the files it lists."""

from __future__ import annotations

import pytest

from bagel_data.errors import ConfigError
from bagel_data.sources.parquet import list_parquet_files, resolve_file_order


def test_the_default_order_is_sorted_and_compat_lists_as_the_filesystem_does():
    assert resolve_file_order(None, None) == "sorted"
    assert resolve_file_order(None, "bagel") == "filesystem"


def test_an_explicit_order_is_kept_where_it_does_not_contradict_compat():
    assert resolve_file_order("sorted", None) == "sorted"
    assert resolve_file_order("filesystem", None) == "filesystem"
    assert resolve_file_order("filesystem", "bagel") == "filesystem"
    with pytest.raises(ConfigError, match="file_order"):
        resolve_file_order("sorted", "bagel")


def test_sorted_listing_names_only_parquet_files_by_name(tmp_path):
    for name in ("b.parquet", "a.parquet", "notes.txt", "c.parquet.tmp"):
        (tmp_path / name).write_bytes(b"")
    assert list_parquet_files(str(tmp_path)) == [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    with pytest.raises(ConfigError, match="file_order"):
        list_parquet_files(str(tmp_path), "newest")
    with pytest.raises(ConfigError, match="data_dir"):
        list_parquet_files(str(tmp_path / "missing"))
