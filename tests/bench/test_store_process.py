"""The object store of `bench --remote` served from a child process: uploads, the delay and
the request counts reach the child; its failures come back as errors naming the command."""

from __future__ import annotations

import time

import pyarrow.fs as pafs
import pytest

from bagel_bench.store_process import store_process

pytest.importorskip("moto.server")


def _client(store) -> pafs.S3FileSystem:
    options = store.proxy.storage_options()
    return pafs.S3FileSystem(**options)


def test_a_child_serves_what_was_uploaded_and_counts_the_requests(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"first")
    (tmp_path / "b.txt").write_bytes(b"second")
    with store_process() as store:
        assert store.upload(tmp_path, "s3://bucket/prefix") == 2
        store.proxy.counter.reset()
        fs = _client(store)
        with fs.open_input_stream("bucket/prefix/b.txt") as stream:
            assert stream.read() == b"second"
        counts = store.proxy.counter.reset()
        assert sum(counts.values()) >= 1 and set(counts) <= {"GET object", "HEAD object"}, counts
        assert store.proxy.counter.reset() == {}  # counting starts again from zero
        store.proxy.delay_s = 0.2
        assert store.proxy.delay_s == 0.2
        start = time.perf_counter()
        fs.get_file_info("bucket/prefix/a.txt")
        assert time.perf_counter() - start >= 0.2  # the child's proxy waits before answering
        process = store._process
    assert process.poll() is not None  # gone with the block


def test_a_failure_in_the_child_is_an_error_naming_the_command(tmp_path):
    with store_process() as store:
        with pytest.raises(RuntimeError, match="the object store process failed: upload: IndexError"):
            store.upload(tmp_path, "no scheme")
        with pytest.raises(RuntimeError, match="unknown command 'nonsense'"):
            store._call("nonsense")
        assert store.upload(tmp_path, "s3://bucket/x") == 0  # still serving after both


def test_a_child_that_dies_is_an_error_not_a_hang():
    with store_process() as store:
        store._process.kill()
        store._process.wait()
        with pytest.raises(RuntimeError, match="the object store process exited"):
            store.proxy.counter.reset()
