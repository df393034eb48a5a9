"""The delayed store's files and their tally (bagel_bench/slow_reads.py), which the
read-ahead and video benchmarks count requests with."""

from __future__ import annotations

import multiprocessing

import pytest

from bagel_bench.slow_reads import DelayedFile, Tally, delayed_storage
from bagel_data.sources import storage


def test_a_delayed_file_counts_each_read_and_its_bytes(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(100)))
    tally = Tally()
    with DelayedFile(str(path), 0.0, tally=tally) as handle:
        assert handle.read(30) == bytes(range(30))
        handle.seek(90)
        assert handle.read() == bytes(range(90, 100))
    assert tally.counts() == {"opens": 0, "reads": 2, "bytes": 40}


def test_delayed_storage_counts_opens_and_reads_then_reset_starts_again(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * 10)
    tally = Tally()
    with delayed_storage(0.0, tally=tally):
        with storage.open_input(str(path)) as handle:
            handle.read(4)
    assert tally.reset() == {"opens": 1, "reads": 1, "bytes": 4}
    assert tally.counts() == {"opens": 0, "reads": 0, "bytes": 0}


def test_a_failing_range_raises_and_counts_nothing(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * 10)
    tally = Tally()
    with DelayedFile(str(path), 0.0, fail=(5, 6), tally=tally) as handle:
        assert handle.read(5) == b"xxxxx"
        with pytest.raises(OSError, match="injected"):
            handle.read(1)
    assert tally["reads"] == 1 and tally["bytes"] == 5


def _add(tally: Tally) -> None:
    tally.add("reads", 3)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_a_shared_tally_counts_what_forked_workers_add():
    tally = Tally(shared=True)
    tally.add("opens")
    child = multiprocessing.get_context("fork").Process(target=_add, args=(tally,))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert tally.counts() == {"opens": 1, "reads": 3, "bytes": 0}
