"""JsonlIndex builds the same arrays as the straightforward splitlines + sorted-tuples build."""

from __future__ import annotations

import random
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bagel_data.sources import jsonl
from bagel_data.sources.jsonl import JsonlIndex


def _canonical(line: bytes) -> bytes:
    if line.endswith(b"\r\n"):
        return line[:-2] + b"\n"
    if line.endswith(b"\r"):
        return line[:-1] + b"\n"
    return line


def reference(paths, image_dirs, num_used, shuffle_lines=False, shuffle_seed=0):
    """The old build: every line as bytes, sorted as (canonical bytes, folder) tuples."""
    keys, offsets, line_numbers, file_ids = [], [], [], []
    for file_id, (path, image_dir, count) in enumerate(zip(paths, image_dirs, num_used)):
        with open(path, "rb") as handle:
            lines = handle.read().splitlines(keepends=True)
        starts = [0]
        for line in lines:
            starts.append(starts[-1] + len(line))
        order = list(range(len(lines)))
        if shuffle_lines:
            random.Random(shuffle_seed).shuffle(order)
        for line_no in order[:count]:
            keys.append((_canonical(lines[line_no]), image_dir))
            offsets.append(starts[line_no])
            line_numbers.append(line_no)
            file_ids.append(file_id)
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return (
        np.asarray(offsets, dtype=np.int64)[order],
        np.asarray(line_numbers, dtype=np.int32)[order],
        np.asarray(file_ids, dtype=np.int32)[order],
        [(keys[i][0].decode("utf-8", "replace"), keys[i][1]) for i in order],
    )


def check(paths, image_dirs, num_used, shuffle_lines=False, shuffle_seed=0, texts=True):
    index = JsonlIndex(paths, image_dirs, num_used, shuffle_lines, shuffle_seed)
    offsets, line_numbers, file_ids, entries = reference(paths, image_dirs, num_used, shuffle_lines, shuffle_seed)
    for got, want in ((index.offsets, offsets), (index.line_numbers, line_numbers), (index.file_ids, file_ids)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    if texts:
        assert [index[i] for i in range(len(index))] == entries
    close(index)
    return index


def close(index: JsonlIndex) -> None:
    for handle in index._handles.values():
        handle.close()
    index._handles.clear()


def write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


CASES = {
    "lf": b'{"a": 2}\n{"a": 1}\n{"a": 3}\n',
    "crlf": b'{"a": 2}\r\n{"a": 1}\r\n{"a": 3}\r\n',
    "cr": b'{"a": 2}\r{"a": 1}\r{"a": 3}\r',
    "mixed": b'{"b": 1}\r\n{"a": 1}\r{"a": 1}\n{"c": 0}\r\r\n\n{"a": 1}\r\n',
    "no_final_terminator": b'{"z": 1}\n{"a": 1}\n{"a": 1}',
    "empty_lines": b"\n\n{}\n\r\n\r\n\r\r{}\n",
    "duplicates": b"{}\n{}\r\n{}\r{}\n{}",
    "utf8": '{"t": "é"}\n{"t": "zß"}\r\n{"t": "日本"}\n{"t": "e"}\n'.encode(),
    "empty": b"",
    "only_cr": b"\r",
}


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_single_file_matches_reference(tmp_path, name, shuffle):
    path = write(tmp_path, "data.jsonl", CASES[name])
    for count in (0, 1, 2, 3, 100, -1):
        check([path], ["images"], [count], shuffle, shuffle_seed=7)


@pytest.mark.parametrize("block", [1, 2, 3, 5, 64])
def test_tiny_blocks_cut_lines_like_splitlines(tmp_path, block):
    # Every terminator, including a "\r\n" split across two reads, lands on a block edge.
    paths = [write(tmp_path, f"{name}.jsonl", data) for name, data in sorted(CASES.items())]
    with mock.patch.object(jsonl, "_BLOCK", block):
        for shuffle in (False, True):
            check(paths, [f"dir{i % 3}" for i in range(len(paths))], [100] * len(paths), shuffle, 3)
            check(paths, ["d"] * len(paths), [2] * len(paths), shuffle, 3)


@pytest.mark.parametrize("shuffle", [False, True])
def test_equal_lines_in_two_files_order_by_folder(tmp_path, shuffle):
    first = write(tmp_path, "a.jsonl", b'{"x": 1}\n{"same": 1}\n{"same": 1}\r\n{"y": 2}\n')
    second = write(tmp_path, "b.jsonl", b'{"same": 1}\n{"x": 1}\r\n{"w": 0}\n')
    # The later file has the smaller folder: its copies of the shared lines come first.
    index = check([first, second], ["zeta", "alpha"], [4, 3], shuffle, 1)
    same = [i for i in range(len(index)) if index[i][0] == '{"same": 1}\n']
    assert [index.image_dir(i) for i in same] == ["alpha", "zeta", "zeta"]
    close(index)
    check([first, second], ["alpha", "zeta"], [4, 3], shuffle, 1)
    check([first, second], ["same", "same"], [4, 3], shuffle, 1)
    check([first, second, first], ["b", "a", "a"], [3, 2, 4], shuffle, 5)
    # Only two lines, equal, the later file's folder first: the smallest input still sorts by folder.
    one = write(tmp_path, "c.jsonl", b'{"same": 1}\n')
    two = write(tmp_path, "d.jsonl", b'{"same": 1}\n')
    index = check([one, two], ["zeta", "alpha"], [1, 1])
    assert [index.image_dir(i) for i in range(2)] == ["alpha", "zeta"]


def test_num_used_smaller_than_file(tmp_path):
    lines = [f'{{"n": {i % 17}}}\n'.encode() for i in range(200)]
    path = write(tmp_path, "data.jsonl", b"".join(lines))
    other = write(tmp_path, "other.jsonl", b"".join(reversed(lines)))
    for shuffle in (False, True):
        for seed in (0, 1, 42):
            check([path, other], ["p", "o"], [50, 120], shuffle, seed)


def test_more_folders_than_files_and_missing_counts(tmp_path):
    path = write(tmp_path, "data.jsonl", CASES["mixed"])
    check([path], ["b", "a"], [10])
    check([path, path], ["b", "a"], [10])
    check([], [], [])


def testrelease_free_heap_skips_without_glibc():
    jsonl.release_free_heap()
    with mock.patch.object(jsonl.ctypes, "CDLL", side_effect=OSError("no libc.so.6")):
        assert jsonl._libc_malloc_trim() is None
    with mock.patch.object(jsonl.ctypes, "CDLL", return_value=object()):  # a libc without malloc_trim
        assert jsonl._libc_malloc_trim() is None
    with mock.patch.object(jsonl, "_MALLOC_TRIM", None):
        jsonl.release_free_heap()


ALPHABET = [b"{", b"}", b"a", b"\r", b"\n", b" ", "é".encode()]
LINES = st.lists(
    st.tuples(
        st.lists(st.sampled_from(ALPHABET), max_size=6).map(b"".join),
        st.sampled_from([b"\n", b"\r\n", b"\r", b""]),
    ).map(b"".join),
    max_size=12,
).map(b"".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(st.tuples(LINES, st.sampled_from(["a", "b", "c"]), st.integers(-2, 14)), min_size=1, max_size=3),
    shuffle=st.booleans(),
    seed=st.integers(0, 3),
    block=st.sampled_from([1, 2, 3, 7, 1 << 20]),
)
def test_random_bytes_match_reference(tmp_path, files, shuffle, seed, block):
    paths = [write(tmp_path, f"f{i}.jsonl", data) for i, (data, _, _) in enumerate(files)]
    with mock.patch.object(jsonl, "_BLOCK", block):
        check(paths, [folder for _, folder, _ in files], [count for _, _, count in files], shuffle, seed, texts=False)


def test_an_index_with_open_files_pickles_and_reads_the_same_lines(tmp_path):
    """Workers started with `spawn` receive the index by pickle, after the main process may
    already have read lines (and so holds open file handles)."""
    import pickle

    path = tmp_path / "a.jsonl"
    path.write_text("".join(f'{{"i": {i}}}\n' for i in range(5)))
    index = JsonlIndex([str(path)], [str(tmp_path)], [5])
    before = [index[i] for i in range(len(index))]  # opens a handle
    copy = pickle.loads(pickle.dumps(index))
    assert [copy[i] for i in range(len(copy))] == before
    assert [index.location(i) for i in range(5)] == [copy.location(i) for i in range(5)]


class _CountingReads:
    """A file handle that records the size of every read."""

    def __init__(self, handle, reads: list):
        self.handle, self.reads = handle, reads

    def read(self, size=-1):
        data = self.handle.read(size)
        self.reads.append(len(data))
        return data

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def test_the_lines_used_are_read_only_as_far_as_needed(tmp_path, monkeypatch):
    """`num_used` lines from the top of an unshuffled file need only the blocks holding them
    (here 8-byte lines in 16-byte blocks): a few lines of a huge file cost a few reads."""
    path = write(tmp_path, "big.jsonl", b"".join(b'{"n":%d}\n' % (i % 10) for i in range(100)))
    monkeypatch.setattr(jsonl, "_BLOCK", 16)
    reads: list = []
    opener = jsonl.storage.open_input
    monkeypatch.setattr(jsonl.storage, "open_input", lambda p: _CountingReads(opener(p), reads))
    for num_used, blocks in ((4, [16, 16]), (5, [16, 16, 16]), (0, [])):
        reads.clear()
        index = JsonlIndex([path], [str(tmp_path)], [num_used])
        assert len(index) == num_used and reads == blocks, num_used


def test_without_shuffle_arguments_the_first_lines_are_used_and_shuffling_seeds_with_0(tmp_path):
    """The reference's defaults: `shuffle_lines=False` (the first lines) and `shuffle_seed=0`."""
    path = write(tmp_path, "five.jsonl", b"".join(b'{"k": "%s"}\n' % c for c in (b"e", b"d", b"c", b"b", b"a")))
    first_two = JsonlIndex([path], [str(tmp_path)], [2])
    assert [first_two[i][0] for i in range(2)] == ['{"k": "d"}\n', '{"k": "e"}\n']
    shuffled = JsonlIndex([path], [str(tmp_path)], [2], True)
    assert [shuffled[i] for i in range(2)] == reference([path], [str(tmp_path)], [2], True, 0)[3]
    close(first_two)
    close(shuffled)


# -- the external sort: runs spilled to files and merged ----------------------------------------
PREFIXES = st.sampled_from([b"", b'{"conversations": [{"from": "human", "value": "', b"x" * 40 + b"\t"])
SHARED = st.tuples(
    PREFIXES,
    st.lists(
        st.tuples(
            st.lists(st.sampled_from([b"a", b"b", b"\x00", b" ", "é".encode(), b"\xff"]), max_size=4).map(b"".join),
            st.sampled_from([b"\n", b"\r\n", b"\r", b""]),
            st.integers(1, 3),  # copies: duplicated lines
        ),
        max_size=10,
    ),
).map(lambda t: b"".join((t[0] + body + end) * copies for body, end, copies in t[1]))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(st.tuples(SHARED, st.sampled_from(["a", "b", "c"]), st.integers(-2, 30)), min_size=1, max_size=4),
    shuffle=st.booleans(),
    seed=st.integers(0, 3),
    block=st.sampled_from([1, 5, 64, 1 << 20]),
    fan_in=st.sampled_from([2, 3, 64]),
)
def test_spilled_runs_merge_to_sorted_order(tmp_path, files, shuffle, seed, block, fan_in):
    """Lines sharing prefixes longer than any fixed width, duplicates, every line end, several
    files and folders: runs of a block or less, merged a few at a time, give `sorted()`'s order."""
    paths = [write(tmp_path, f"f{i}.jsonl", data) for i, (data, _, _) in enumerate(files)]
    with (
        mock.patch.object(jsonl, "_BLOCK", block),
        mock.patch.object(jsonl, "_RUN_FLOOR", 1),  # every block spills a run
        mock.patch.object(jsonl.jsonl_sort, "_FAN_IN", fan_in),
        mock.patch.object(jsonl.jsonl_sort, "_READ_CHUNK", 3),
        mock.patch.object(jsonl.jsonl_sort, "_READ_BUFFER", 2),
        mock.patch.object(jsonl.jsonl_sort, "_OUT_CHUNK", 5),
    ):
        check(paths, [folder for _, folder, _ in files], [count for _, _, count in files], shuffle, seed, texts=False)


def test_runs_are_spilled_merged_and_removed(tmp_path, monkeypatch):
    """With a tiny run budget, the build writes run files, merges them in rounds, and leaves
    none behind; the order equals one in-memory sort of the same lines."""
    lines = [b'{"conversations": [{"value": "%d"}]}\n' % (i * 7919 % 1000) for i in range(3000)]
    path = write(tmp_path, "many.jsonl", b"".join(lines))
    monkeypatch.setattr(jsonl, "_BLOCK", 4096)
    monkeypatch.setattr(jsonl, "_RUN_FLOOR", 1)
    monkeypatch.setattr(jsonl.jsonl_sort, "_FAN_IN", 4)
    spilled: list = []
    write_run = jsonl.jsonl_sort.RunSorter._write_run
    monkeypatch.setattr(
        jsonl.jsonl_sort.RunSorter, "_write_run", lambda self, chunks: spilled.append(1) or write_run(self, chunks)
    )
    work = tmp_path / "work"
    got = jsonl.build_arrays(
        [(path, "d", 3000)],
        False,
        0,
        str(work),
        lambda n: tuple(np.empty(n, t) for t in (np.int64, np.int32, np.int32)),
    )
    assert len(spilled) > 30  # about 30 block runs, then the rounds merging 4 at a time
    assert not list(work.iterdir())
    want = reference([path], ["d"], [3000])
    for array, expected in zip(got, want[:3]):
        np.testing.assert_array_equal(array, expected)


def _read_many(index: JsonlIndex, line: int, want: str, times: int) -> bool:
    return all(index[line][0] == want for _ in range(times))


def test_a_forked_process_reads_through_handles_of_its_own(tmp_path):
    """A fork copies open files with their position shared between the processes: a
    parent that has read lines (a DataLoader's main process, its read-ahead) and its
    workers would move each other's position between a seek and a read."""
    import multiprocessing
    import threading

    lines = [f'{{"n": {n}, "pad": "{"x" * (50 + 37 * n)}"}}\n'.encode() for n in range(12)]
    path = write(tmp_path, "a.jsonl", b"".join(lines))
    index = JsonlIndex([path], [str(tmp_path)], [len(lines)])
    first, last = index[0][0], index[len(index) - 1][0]  # the parent's handle is now open
    results: list[bool] = []
    reader = threading.Thread(target=lambda: results.append(_read_many(index, 0, first, 3000)))
    reader.start()  # the parent keeps reading while its children do
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_child_reads, args=(index, len(index) - 1, last), daemon=True) for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(30)
        if child.exitcode is None:  # stuck on a lock the parent's reader held at the fork
            child.kill()
            child.join()
    reader.join(30)
    assert [child.exitcode for child in children] == [0, 0]
    assert results == [True]
    close(index)


def _child_reads(index: JsonlIndex, line: int, want: str) -> None:
    raise SystemExit(0 if _read_many(index, line, want, 3000) else 1)
