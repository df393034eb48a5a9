"""A store folder is listed once per node by processes started together, through the node
cache (sources/shared_listing.py), and afresh once the listing is older than its TTL or in
another launch."""

from __future__ import annotations

import os
import time

import fsspec
import pytest

from bagel_data import ConfigError
from bagel_data.sources import node_cache, shared_listing, storage


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(node_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(shared_listing.TTL_ENV, raising=False)
    monkeypatch.delenv(shared_listing.RUN_ENV, raising=False)
    return tmp_path / "cache"


@pytest.fixture
def folder(monkeypatch):
    """A folder of fsspec's memory store (a URI: listed as a store's), and the count of
    the listings that reached it."""
    memory = fsspec.filesystem("memory")
    root = f"/shared-listing-{time.time_ns()}"
    memory.pipe(f"{root}/a.tar", b"1234")
    memory.pipe(f"{root}/b.tar", b"12")
    calls: list[str] = []
    listed = storage._list_store

    def counted(path):
        calls.append(path)
        return listed(path)

    monkeypatch.setattr(storage, "_list_store", counted)
    yield memory, f"memory://{root}", calls
    memory.rm(root, recursive=True)


def test_a_second_listing_within_the_ttl_is_read_from_the_node_cache(cache, folder):
    memory, uri, calls = folder
    first = storage.list_entries(uri)
    memory.pipe(f"{uri.removeprefix('memory://')}/c.tar", b"1")  # changed within the TTL: not seen yet
    again = storage.list_entries(uri)
    assert [entry.name for entry in first] == ["a.tar", "b.tar"] and [e.size for e in first] == [4, 2]
    assert again == first and len(calls) == 1
    assert storage.list_entries(uri + "/") == first and len(calls) == 1  # the same folder


def test_a_listing_older_than_the_ttl_or_of_another_launch_is_taken_again(cache, folder, monkeypatch):
    memory, uri, calls = folder
    storage.list_entries(uri)
    memory.pipe(f"{uri.removeprefix('memory://')}/c.tar", b"1")
    now = time.time()
    monkeypatch.setattr(shared_listing.time, "time", lambda: now + shared_listing.TTL_S + 1)
    assert [entry.name for entry in storage.list_entries(uri)] == ["a.tar", "b.tar", "c.tar"]
    assert len(calls) == 2
    storage.list_entries(uri)
    assert len(calls) == 2  # kept again from the new listing
    monkeypatch.setenv(shared_listing.RUN_ENV, "another-launch")
    storage.list_entries(uri)
    assert len(calls) == 3


@pytest.mark.parametrize(("variable", "value"), [(shared_listing.TTL_ENV, "0"), (node_cache.ENV, "off")])
def test_with_no_ttl_or_no_node_cache_each_listing_asks_the_store(cache, folder, monkeypatch, variable, value):
    _, uri, calls = folder
    monkeypatch.setenv(variable, value)
    storage.list_entries(uri)
    storage.list_entries(uri)
    assert len(calls) == 2


def test_a_missing_folder_is_not_kept_and_a_bad_ttl_is_named(cache, folder, monkeypatch):
    _, uri, calls = folder
    for _ in range(2):
        with pytest.raises(FileNotFoundError):
            storage.list_entries(uri + "-missing")
    assert len(calls) == 2
    monkeypatch.setenv(shared_listing.TTL_ENV, "a minute")
    with pytest.raises(ConfigError, match=shared_listing.TTL_ENV):
        storage.list_entries(uri)


def test_processes_started_together_list_a_store_folder_once(tmp_path, cache, monkeypatch):
    """Four processes of a node list one S3 folder at the same moment: one listing reaches
    the store, the others wait on the node cache's lock and read it; all see the same."""
    pytest.importorskip("moto.server")
    from bagel_bench.store_process import store_process

    data = tmp_path / "data"
    data.mkdir()
    for index in range(5):
        (data / f"{index:05d}.tar").write_bytes(b"x" * (index + 1))
    monkeypatch.setattr(storage, "_OPTIONS", {})
    with store_process(0.05) as store:  # a round trip: the others start while one lists
        store.upload(data, "s3://shared-listing/tars")
        storage.register_options("s3://shared-listing", store.proxy.storage_options())
        store.proxy.counter.reset()
        read, write = os.pipe()
        children = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                os.read(read, 1)  # all four start at once
                entries = storage.list_entries("s3://shared-listing/tars")
                os._exit(0 if [(e.name, e.size) for e in entries] == [(f"{i:05d}.tar", i + 1) for i in range(5)] else 1)
            children.append(pid)
        os.write(write, b"go!!")
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
        requests = store.proxy.counter.reset()
    assert codes == [0, 0, 0, 0]
    assert requests.get("GET list") == 1, requests
