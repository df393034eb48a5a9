"""Inputs on a filesystem pyarrow has none for, through fsspec (its in-memory filesystem here)."""

from __future__ import annotations

import fsspec
import pytest

from bagel_data import ConfigError
from bagel_data.schema.settings import READ_AHEAD_BYTES
from bagel_data.sources import storage
from helpers.golden import GOLDEN_CASES, absolute_dataset_info, first_packs, load_case


@pytest.fixture
def unit_walk(monkeypatch):
    """The walk by whole units on local files too: files on an object store are walked by
    units (families/unit_plan.py, `walks_rows`), and these tests hold the two to the same
    stream (or pin the unit walk's own message)."""
    from bagel_data.families.unit_plan import UnitPlan

    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)


@pytest.fixture()
def memory_copy(golden_root):
    """The golden data uploaded to fsspec's memory filesystem; (local root, memory root)."""
    local_root = str((GOLDEN_CASES / ".." / "data").resolve())
    memory = fsspec.filesystem("memory")
    memory.put(local_root, "/golden-data", recursive=True)
    yield local_root, "memory://golden-data"
    memory.rm("/golden-data", recursive=True)


def test_fsspec_memory_filesystem_matches_local(memory_copy, tokenizer, special_tokens, unit_walk):
    local_root, memory_root = memory_copy
    case, _, _ = load_case("packed_three_groups_flex")
    info = absolute_dataset_info(case)
    remote = {g: {n: {k: (v.replace(local_root, memory_root) if isinstance(v, str) else v) for k, v in meta.items()}
                  for n, meta in datasets.items()} for g, datasets in info.items()}  # fmt: skip
    assert remote["vlm_sft"]["vlm"]["jsonl_path"].startswith("memory://")
    local, _ = first_packs(case, info, tokenizer, special_tokens, 2)
    remote_packs, _ = first_packs(case, remote, tokenizer, special_tokens, 2)
    for a, b in zip(local, remote_packs):
        assert a["batch_data_indexes"] == b["batch_data_indexes"]
        for key in ("packed_text_ids", "padded_images", "packed_vit_tokens"):
            assert a[key].equal(b[key]), key


def test_groups_on_a_remote_filesystem_read_ahead_by_default_and_local_ones_do_not(
    memory_copy, tokenizer, special_tokens
):
    local_root, memory_root = memory_copy
    case, _, _ = load_case("packed_three_groups_flex")
    assert "read_ahead_bytes" not in case["packing"]  # the default, unset
    info = absolute_dataset_info(case)
    remote = {g: {n: {k: (v.replace(local_root, memory_root) if isinstance(v, str) else v) for k, v in meta.items()}
                  for n, meta in datasets.items()} for g, datasets in info.items()}  # fmt: skip
    _, local = first_packs(case, info, tokenizer, special_tokens, 1)
    _, elsewhere = first_packs(case, remote, tokenizer, special_tokens, 1)
    assert [group.reads_remote for group in local.groups] == [False] * len(local.groups)
    assert [group.reads_remote for group in elsewhere.groups] == [True] * len(elsewhere.groups)
    assert local.stats["read_ahead"] == {}
    budgets = {name: stats["budget_bytes"] for name, stats in elsewhere.stats["read_ahead"].items()}
    assert budgets == {group.name: READ_AHEAD_BYTES for group in elsewhere.groups}


def test_is_remote_is_any_uri_but_a_local_file_one():
    assert storage.is_remote("s3://bucket/x") and storage.is_remote("memory://a/b")
    assert not storage.is_remote("/data/x.parquet") and not storage.is_remote("file:///data/x.parquet")


def test_a_scheme_no_filesystem_handles_is_a_config_error(golden_root, tokenizer, special_tokens):
    case, _, _ = load_case("packed_three_groups_flex")
    info = absolute_dataset_info(case)
    info["t2i_pretrain"]["t2i"]["data_dir"] = "nosuchfs://bucket/t2i"
    with pytest.raises(ConfigError, match=r"dataset_info\.t2i_pretrain\.t2i\.data_dir.*nosuchfs://bucket/t2i"):
        first_packs(case, info, tokenizer, special_tokens, 1)


def test_inner_paths_are_parsed_without_contacting_a_store():
    assert storage._inner_path("s3://bucket/a/b.parquet") == "bucket/a/b.parquet"
    assert storage._inner_path("gs://bucket/dir/") == "bucket/dir"
    assert storage._inner_path("hdfs://namenode:8020/data/x") == "/data/x"
    assert storage._inner_path("memory://bucket/x.txt") == "/bucket/x.txt"


def test_list_entries_sorts_by_name_unless_told_not_to(tmp_path):
    names = [f"part-{number:03d}.parquet" for number in (7, 1, 30, 2, 19, 5, 11, 0, 23, 14, 3, 28)]
    for size, name in enumerate(names):
        (tmp_path / name).write_bytes(b"x" * size)
    entries = storage.list_entries(str(tmp_path))
    assert [entry.name for entry in entries] == sorted(names)
    assert {entry.name: entry.size for entry in entries} == {name: size for size, name in enumerate(names)}
    assert sorted(entry.name for entry in storage.list_entries(str(tmp_path), sort=False)) == sorted(names)


def test_a_folder_and_a_dangling_link_are_listed_as_pyarrow_would(tmp_path):
    """A folder has size 0 (pyarrow gives none), a link to nothing size -1 (missing): the
    checkpoint's input record is then the same for local and remote listings."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "data.parquet").write_bytes(b"12345")
    (tmp_path / "gone.parquet").symlink_to(tmp_path / "nowhere.parquet")
    entries = {entry.name: (entry.size, entry.mtime_ns is None) for entry in storage.list_entries(str(tmp_path))}
    assert entries == {"data.parquet": (5, False), "gone.parquet": (-1, True), "sub": (0, False)}


def test_hdfs_without_a_port_uses_the_namenode_default(monkeypatch):
    built = []

    def hadoop(host, port, **options):
        built.append((host, port, options))
        return storage.pafs.LocalFileSystem()

    monkeypatch.setattr(storage.pafs, "HadoopFileSystem", hadoop)
    monkeypatch.setattr(storage, "_BUILT", {})  # these two built now, and forgotten after
    storage._filesystem_for("hdfs://namenode", (("user", "me"),), None)
    storage._filesystem_for("hdfs://namenode:9000", (("user", "me"),), None)
    assert built == [("namenode", 8020, {"user": "me"}), ("namenode", 9000, {"user": "me"})]


def test_a_remote_listing_is_one_level_deep():
    memory = fsspec.filesystem("memory")
    memory.pipe("/listing-depth/folder/a.parquet", b"12")
    memory.pipe("/listing-depth/folder/sub/b.parquet", b"345")
    try:
        names = [entry.name for entry in storage.list_entries("memory://listing-depth/folder")]
    finally:
        memory.rm("/listing-depth", recursive=True)
    assert names == ["a.parquet", "sub"]


def test_a_conversation_group_whose_images_are_remote_reads_ahead(memory_copy, tokenizer, special_tokens):
    """Its JSONL may lie on local disk while every image is fetched from the store."""
    local_root, memory_root = memory_copy
    case, _, _ = load_case("packed_three_groups_flex")
    info = absolute_dataset_info(case)
    for meta in info["vlm_sft"].values():
        meta["data_dir"] = meta["data_dir"].replace(local_root, memory_root)
        assert not storage.is_remote(meta["jsonl_path"])
    _, packed = first_packs(case, info, tokenizer, special_tokens, 1)
    remote = {group.name: group.reads_remote for group in packed.groups}
    assert remote == {name: name == "vlm_sft" for name in remote}
