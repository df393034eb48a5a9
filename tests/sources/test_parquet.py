"""sources/parquet.py: which listing order a group gets, and the files it lists."""

from __future__ import annotations

import pytest
import torch.distributed

from bagel_data.compat import CompatPolicy
from bagel_data.errors import ConfigError
from bagel_data.sources import parquet
from bagel_data.sources.parquet import get_parquet_data_paths, list_parquet_files


def test_the_default_order_is_sorted_and_compat_lists_as_the_filesystem_does():
    assert CompatPolicy().file_order(None) == "sorted"
    assert CompatPolicy("bagel").file_order(None) == "filesystem"


def test_an_explicit_order_is_kept_where_it_does_not_contradict_compat():
    assert CompatPolicy().file_order("sorted") == "sorted"
    assert CompatPolicy().file_order("filesystem") == "filesystem"
    assert CompatPolicy("bagel").file_order("filesystem") == "filesystem"
    with pytest.raises(ConfigError, match="file_order"):
        CompatPolicy("bagel").file_order("sorted")


def test_sorted_listing_names_only_parquet_files_by_name(tmp_path):
    for name in ("b.parquet", "a.parquet", "notes.txt", "c.parquet.tmp"):
        (tmp_path / name).write_bytes(b"")
    assert list_parquet_files(str(tmp_path)) == [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    with pytest.raises(ConfigError, match="file_order"):
        list_parquet_files(str(tmp_path), "newest")
    with pytest.raises(ConfigError, match="data_dir"):
        list_parquet_files(str(tmp_path / "missing"))


def _folders(tmp_path, count: int) -> list[str]:
    dirs = []
    for k in range(count):
        folder = tmp_path / f"d{k}"
        folder.mkdir()
        for name in ("x.parquet", "y.parquet"):
            (folder / name).write_bytes(b"")
        dirs.append(str(folder))
    return dirs


def test_without_a_process_group_every_rank_lists_every_folder(tmp_path):
    dirs = _folders(tmp_path, 3)
    alone = get_parquet_data_paths(dirs, [3, 1, 2])
    assert get_parquet_data_paths(dirs, [3, 1, 2], rank=1, world_size=2) == alone
    assert alone == [f"{d}/{n}" for d, k in zip(dirs, [3, 1, 2]) for n in (["x.parquet", "y.parquet"] * 2)[:k]]


def test_under_a_process_group_the_ranks_share_the_listing_and_gather_it(tmp_path, monkeypatch):
    """Each rank lists its run of folders; the gathered lists, in rank order, are the whole
    listing (here the gather is played by a stand-in that lists each rank's folders)."""
    dirs, counts, world = _folders(tmp_path, 5), [1, 2, 3, 4, 5], 2
    expected = get_parquet_data_paths(dirs, counts)
    listed_here: list = []

    def all_gather_object(gathered, mine):
        listed_here.append(mine)
        chunk = -(-len(dirs) // world)
        for rank in range(world):
            part = slice(rank * chunk, (rank + 1) * chunk)
            gathered[rank] = get_parquet_data_paths(dirs[part], counts[part])

    monkeypatch.setattr(parquet, "process_group_ready", lambda: True)
    monkeypatch.setattr(torch.distributed, "all_gather_object", all_gather_object)
    for rank, part in ((0, slice(0, 3)), (1, slice(3, 5))):
        listed_here.clear()
        assert get_parquet_data_paths(dirs, counts, rank=rank, world_size=world) == expected
        assert listed_here == [get_parquet_data_paths(dirs[part], counts[part])]  # only its own folders
    listed_here.clear()
    assert get_parquet_data_paths(dirs, counts) == expected and listed_here == []  # no world size: lists alone
    assert get_parquet_data_paths(dirs, counts, world_size=world) == expected  # no rank: rank 0
    assert listed_here == [get_parquet_data_paths(dirs[:3], counts[:3])]


def test_write_parquet_info_covers_every_file_of_the_folder_by_default(tmp_path):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bagel_data.sources.parquet import write_parquet_info

    for name, rows in (("b.parquet", 5), ("a.parquet", 3)):
        pq.write_table(pa.table({"x": list(range(rows))}), tmp_path / name, row_group_size=2)
    (tmp_path / "notes.txt").write_text("not a shard")
    info = json.loads(write_parquet_info(tmp_path).read_text())
    assert info == {
        str(tmp_path / "a.parquet"): {"num_row_groups": 2, "num_rows": 3},
        str(tmp_path / "b.parquet"): {"num_row_groups": 3, "num_rows": 5},
    }
    moved = json.loads(write_parquet_info(tmp_path, (tmp_path / "b.parquet",), data_dir="s3://bucket/t2i").read_text())
    assert moved == {"s3://bucket/t2i/b.parquet": {"num_row_groups": 3, "num_rows": 5}}
