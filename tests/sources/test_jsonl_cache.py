"""The JSONL index is built once per node into mapped files, and reused while its inputs are unchanged."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from bagel_data.errors import IndexCacheWarning
from bagel_data.sources import jsonl, jsonl_cache, node_cache
from bagel_data.sources.jsonl import JsonlIndex


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv(jsonl_cache.ENV, str(root))
    return root


def lines_file(tmp_path, name="data.jsonl", count=50, salt=0):
    path = tmp_path / name
    path.write_bytes(b"".join(b'{"n": %d}\n' % ((i * 37 + salt) % 101) for i in range(count)))
    return str(path)


def arrays(index):
    return [np.asarray(a).copy() for a in (index.offsets, index.line_numbers, index.file_ids)]


def no_build(*args, **kwargs):
    raise AssertionError("the index was built again")


def test_a_second_index_maps_the_first_ones_files(tmp_path, cache, monkeypatch):
    path = lines_file(tmp_path)
    first = JsonlIndex([path], ["d"], [40])
    assert isinstance(first.offsets, np.memmap) and len(list(cache.glob("jsonl-*/offsets.npy"))) == 1
    monkeypatch.setattr(jsonl, "build_arrays", no_build)
    second = JsonlIndex([path], ["d"], [40])
    for got, want in zip(arrays(second), arrays(first)):
        np.testing.assert_array_equal(got, want)
    assert [second[i] for i in range(len(second))] == [first[i] for i in range(len(first))]


def test_a_changed_file_or_setting_builds_a_new_index(tmp_path, cache):
    path = lines_file(tmp_path)
    before = arrays(JsonlIndex([path], ["d"], [40]))
    for other in (
        JsonlIndex([path], ["d"], [30]),  # fewer lines
        JsonlIndex([path], ["d"], [40], shuffle_lines=True, shuffle_seed=3),
        JsonlIndex([path, path], ["d", "e"], [40, 40]),
    ):
        assert [len(a) for a in arrays(other)] != [len(a) for a in before] or any(
            not np.array_equal(a, b) for a, b in zip(arrays(other), before)
        )
    stat = os.stat(path)
    lines_file(tmp_path, salt=5)  # same size, new text
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    changed = JsonlIndex([path], ["d"], [40])
    with open(path, "rb") as handle:
        texts = handle.read().splitlines(keepends=True)[:40]
    assert [changed[i][0].encode() for i in range(len(changed))] == sorted(texts)
    assert len(list(cache.glob("jsonl-*/offsets.npy"))) == 5


def test_a_mapped_index_pickles_as_its_folder(tmp_path, cache):
    path = lines_file(tmp_path, count=2000)
    index = JsonlIndex([path], ["d"], [2000])
    data = pickle.dumps(index)
    assert len(data) < 2000  # not 16 bytes a line
    copy = pickle.loads(data)
    assert isinstance(copy.offsets, np.memmap)
    assert [copy[i] for i in range(0, 2000, 97)] == [index[i] for i in range(0, 2000, 97)]


def test_off_builds_in_memory_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(jsonl_cache.ENV, "off")
    path = lines_file(tmp_path)
    index = JsonlIndex([path], ["d"], [40])
    assert not isinstance(index.offsets, np.memmap) and len(index) == 40
    assert len(pickle.dumps(index)) > 40 * 16  # the arrays travel
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl"]


def test_a_failed_build_leaves_nothing_and_the_next_one_builds(tmp_path, cache, monkeypatch):
    path = lines_file(tmp_path)
    real = jsonl.build_arrays
    monkeypatch.setattr(jsonl, "build_arrays", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    # The cache is given up for this process (a warning), and the in-memory build fails too.
    with pytest.raises(OSError, match="disk full"), pytest.warns(IndexCacheWarning, match="disk full"):
        JsonlIndex([path], ["d"], [40])
    assert not list(cache.iterdir())  # no folder, no lock file
    monkeypatch.setattr(node_cache, "_warned", set())
    monkeypatch.setattr(jsonl, "build_arrays", real)
    assert len(JsonlIndex([path], ["d"], [40])) == 40


def test_a_process_waits_for_the_one_building(tmp_path, cache):
    """While the lock is held (another process building), construction waits, then maps."""
    path = lines_file(tmp_path)
    key = jsonl_cache.cache_key([path], [["d"], ["40"], False, 0])
    cache.mkdir()
    built: list = []
    with open(cache / f"{key}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        worker = threading.Thread(target=lambda: built.append(JsonlIndex([path], ["d"], [40])))
        worker.start()
        time.sleep(0.5)
        assert worker.is_alive() and not (cache / key).exists()
        fcntl.flock(lock, fcntl.LOCK_UN)
    worker.join(timeout=60)
    assert len(built[0]) == 40 and (cache / key).is_dir()


def test_the_lock_is_let_go_before_the_index_is_mapped(tmp_path, cache, monkeypatch):
    """Processes woken one at a time by the builder's unlock must not each map the arrays
    while holding the lock: every mapping happens with the lock free."""
    path = lines_file(tmp_path)
    held: list[bool] = []
    holding = [False]
    real_open, real_locked = jsonl_cache.checked_arrays, node_cache.locked

    @contextlib.contextmanager
    def watched_lock(lock: str):
        with real_locked(lock):
            holding[0] = True
            try:
                yield
            finally:
                holding[0] = False

    def probing_open(folder: str, sizes, *kind):
        held.append(holding[0])
        return real_open(folder, sizes, *kind)

    monkeypatch.setattr(node_cache, "locked", watched_lock)
    monkeypatch.setattr(jsonl_cache, "checked_arrays", probing_open)
    assert len(JsonlIndex([path], ["d"], [40])) == 40  # built, then mapped
    assert len(JsonlIndex([path], ["d"], [40])) == 40  # mapped
    assert held and not any(held), held


CHILD = """
import sys
from bagel_data.sources import jsonl
real = jsonl.build_arrays
def counted(*args):
    with open(sys.argv[2], "a") as out:
        out.write("built\\n")
    return real(*args)
jsonl.build_arrays = counted
index = jsonl.JsonlIndex([sys.argv[1]], ["d"], [3000])
print(len(index), int(index.offsets[0]), int(index.offsets[-1]))
"""


def test_processes_on_one_node_build_it_once(tmp_path, cache):
    path = lines_file(tmp_path, count=3000)
    log = tmp_path / "builds.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, path, str(log)], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(4)
    ]
    outputs = {child.communicate(timeout=120)[0] for child in children}
    assert all(child.returncode == 0 for child in children)
    assert len(outputs) == 1 and outputs.pop().split()[0] == "3000"
    assert log.read_text() == "built\n"
