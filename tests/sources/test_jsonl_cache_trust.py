"""The node's JSONL index cache trusts neither mtimes, nor a shared folder, nor its own files:
a stale, planted or damaged index is never read, and a cache it cannot write costs a warning,
not the run."""

from __future__ import annotations

import errno
import os
import pathlib
import stat
import warnings

import numpy as np
import pytest

from bagel_data.errors import IndexCacheWarning
from bagel_data.sources import jsonl, jsonl_cache, jsonl_sort, node_cache
from bagel_data.sources.jsonl import JsonlIndex


def lines_file(tmp_path, count=40, width=0, reverse=False):
    """Lines of differing lengths; `reverse`: the same bytes in another order (same size)."""
    path = tmp_path / "data.jsonl"
    pad = b"x" * width
    lines = [b'{"n": %d, "p": "%s"}\n' % (i * 37 % 997 * 10 ** (i % 4), pad) for i in range(count)]
    path.write_bytes(b"".join(reversed(lines) if reverse else lines))
    return str(path)


def texts(index):
    return [index[i][0] for i in range(len(index))]


def expected(path, count):
    with open(path, "rb") as handle:
        return sorted(line.decode() for line in handle.read().splitlines(keepends=True)[:count])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv(jsonl_cache.ENV, str(root))
    monkeypatch.setattr(node_cache, "_warned", set())
    return root


@pytest.fixture
def default_cache(tmp_path, monkeypatch):
    """No root in the environment: the default one, in a temporary folder of the test's."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.delenv(jsonl_cache.ENV, raising=False)
    monkeypatch.setattr(jsonl_cache.tempfile, "gettempdir", lambda: str(temp))
    monkeypatch.setattr(node_cache, "_warned", set())
    return temp / f"bagel-data-index-cache-{os.geteuid()}"


@pytest.mark.parametrize("width", [0, 8000])  # 1 KB read whole, 480 KB sampled
def test_a_file_rewritten_with_its_mtime_put_back_is_indexed_again(tmp_path, cache, width):
    path = lines_file(tmp_path, count=60, width=width)
    assert texts(JsonlIndex([path], ["d"], [40])) == expected(path, 40)
    before = os.stat(path)
    lines_file(tmp_path, count=60, width=width, reverse=True)  # as `cp -p` or `rsync -a` leave it
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_size == before.st_size and os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert texts(JsonlIndex([path], ["d"], [40])) == expected(path, 40)


def test_the_default_root_is_this_users_and_closed_to_others(tmp_path, default_cache):
    path = lines_file(tmp_path)
    index = JsonlIndex([path], ["d"], [40])
    assert index._mapped is not None and index._mapped.startswith(str(default_cache) + os.sep)
    info = os.stat(default_cache)
    assert info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) == 0o700


def plant(root, path):
    """An index folder at the key the real one would have, every entry pointing at line 0."""
    key = jsonl_cache.cache_key([path], [["d"], ["40"], False, 0])
    folder = root / key
    folder.mkdir(parents=True)
    for name, dtype in jsonl_cache.ARRAYS:
        np.save(folder / f"{name}.npy", np.zeros(40, dtype))
    return folder


def test_a_default_root_others_can_write_is_moved_aside_not_read(tmp_path, default_cache):
    path = lines_file(tmp_path)
    plant(default_cache, path)
    os.chmod(default_cache, 0o777)
    with pytest.warns(IndexCacheWarning, match="writable by others"):
        index = JsonlIndex([path], ["d"], [40])
    assert texts(index) == expected(path, 40)
    assert stat.S_IMODE(os.stat(default_cache).st_mode) == 0o700
    assert [p.name.split(".unsafe-")[0] for p in default_cache.parent.glob("*.unsafe-*")] == [default_cache.name]


def test_a_set_root_others_can_write_is_not_used_nor_moved(tmp_path, cache):
    path = lines_file(tmp_path)
    plant(cache, path)
    os.chmod(cache, 0o777)
    with pytest.warns(IndexCacheWarning, match=r"others can write it \(mode 777\)"):
        index = JsonlIndex([path], ["d"], [40])
    assert index._mapped is None and texts(index) == expected(path, 40)
    assert cache.is_dir() and not list(tmp_path.glob("*.unsafe-*"))


def test_another_users_root_gives_a_warning_and_an_index_in_memory(tmp_path, default_cache, monkeypatch):
    path = lines_file(tmp_path)
    default_cache.mkdir(mode=0o755)
    plant(default_cache, path)
    owner = os.stat(default_cache).st_uid
    monkeypatch.setattr(jsonl_cache.os, "geteuid", lambda: owner + 1000)  # we are someone else
    monkeypatch.setattr(node_cache, "default_root", lambda: str(default_cache))
    with pytest.warns(IndexCacheWarning, match=f"belongs to user id {owner}"):
        index = JsonlIndex([path], ["d"], [40])
    assert index._mapped is None and texts(index) == expected(path, 40)


def test_a_lock_it_may_not_open_gives_a_warning_not_a_permission_error(tmp_path, cache, monkeypatch):
    path = lines_file(tmp_path)
    real_open = open

    def no_lock(name, *args, **kwargs):
        if str(name).endswith(".lock"):
            raise PermissionError(errno.EACCES, "Permission denied", name)
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(node_cache, "open", no_lock, raising=False)
    with pytest.warns(IndexCacheWarning, match="cannot be written"):
        index = JsonlIndex([path], ["d"], [40])
    assert index._mapped is None and texts(index) == expected(path, 40)


def damage(folder, how, size):
    offsets = folder / "offsets.npy"
    if how == "missing":
        offsets.unlink()
    elif how == "empty":
        offsets.write_bytes(b"")
    elif how == "truncated":
        offsets.write_bytes(offsets.read_bytes()[:-9])
    elif how == "garbage":
        offsets.write_bytes(os.urandom(len(offsets.read_bytes())))
    elif how == "out of range":  # a whole file whose values point past the input's end
        np.save(offsets, np.full(40, 1 << 40, np.int64))
    elif how == "at the end":  # a line start equal to the input's size: no line is there
        np.save(offsets, np.full(40, size, np.int64))
    elif how == "other type":
        np.save(offsets, np.zeros(40, np.float64))


@pytest.mark.parametrize(
    "how", ["missing", "empty", "truncated", "garbage", "out of range", "at the end", "other type"]
)
def test_a_damaged_index_is_built_again(tmp_path, cache, how):
    path = lines_file(tmp_path)
    first = JsonlIndex([path], ["d"], [40])
    folder = first._mapped
    del first
    damage(pathlib.Path(folder), how, os.path.getsize(path))
    again = JsonlIndex([path], ["d"], [40])
    assert again._mapped == folder and texts(again) == expected(path, 40)
    assert np.load(os.path.join(folder, "offsets.npy")).dtype == np.int64


def no_room(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_cache_disk_builds_in_memory_with_one_warning_and_no_lock_left(tmp_path, cache, monkeypatch):
    path = lines_file(tmp_path)
    monkeypatch.setattr(jsonl_cache, "open_memmap", no_room)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        indexes = [JsonlIndex([path], ["d"], [40]) for _ in range(3)]
    assert [w.category for w in caught] == [IndexCacheWarning]
    assert "No space left on device" in str(caught[0].message)
    assert all(index._mapped is None and texts(index) == expected(path, 40) for index in indexes)
    assert list(cache.iterdir()) == []  # no lock, no half-built folder


@pytest.mark.parametrize(
    ("code", "what"),
    [
        (errno.ENOSPC, "No space left on device"),
        (errno.EDQUOT, "Disk quota exceeded"),
        (errno.EFBIG, "File too large"),  # `ulimit -f`
        (errno.EROFS, "Read-only file system"),
        (errno.EACCES, "Permission denied"),
    ],
)
def test_a_work_folder_it_cannot_write_sorts_in_memory_with_one_warning(tmp_path, monkeypatch, code, what):
    """The in-memory build spills its sort's runs to a temporary folder: where that cannot be
    written, whatever the reason, the lines are sorted without spilling, with one warning."""
    monkeypatch.setenv(jsonl_cache.ENV, "off")
    monkeypatch.setattr(node_cache, "_warned", set())
    monkeypatch.setattr(jsonl, "_RUN_FLOOR", 64)  # spill after a few lines
    path = lines_file(tmp_path, count=300)
    real_open = open

    def refusing(name, mode="r", *args, **kwargs):
        if str(name).endswith((".data", ".len")) and "w" in mode:  # a run's files
            raise OSError(code, what, name)
        return real_open(name, mode, *args, **kwargs)

    monkeypatch.setattr(jsonl_sort, "open", refusing, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        indexes = [JsonlIndex([path], ["d"], [300]) for _ in range(2)]
    assert [w.category for w in caught] == [IndexCacheWarning]
    assert what in str(caught[0].message) and "TMPDIR" in str(caught[0].message)
    assert all(texts(index) == expected(path, 300) for index in indexes)


def test_an_error_that_is_not_about_writing_still_raises(tmp_path, monkeypatch):
    monkeypatch.setenv(jsonl_cache.ENV, "off")
    path = lines_file(tmp_path)
    monkeypatch.setattr(jsonl, "build_arrays", lambda *a: (_ for _ in ()).throw(OSError(errno.EBADF, "bad file")))
    with pytest.raises(OSError, match="bad file"):
        JsonlIndex([path], ["d"], [40])


@pytest.mark.parametrize("code", [errno.EFBIG, errno.EDQUOT, errno.EROFS])
def test_a_cache_it_cannot_write_builds_in_memory_with_one_warning(tmp_path, cache, monkeypatch, code):
    path = lines_file(tmp_path)
    monkeypatch.setattr(jsonl_cache, "open_memmap", lambda *a, **k: (_ for _ in ()).throw(OSError(code, "no")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        indexes = [JsonlIndex([path], ["d"], [40]) for _ in range(2)]
    assert [w.category for w in caught] == [IndexCacheWarning]
    assert all(index._mapped is None and texts(index) == expected(path, 40) for index in indexes)
    assert list(cache.iterdir()) == []  # no lock, no half-built folder


@pytest.mark.parametrize("value", ["off", "Off", "OFF", " oFf "])
def test_off_in_any_case_writes_no_cache(tmp_path, default_cache, monkeypatch, value):
    monkeypatch.setenv(jsonl_cache.ENV, value)
    path = lines_file(tmp_path)
    index = JsonlIndex([path], ["d"], [40])
    assert index._mapped is None and texts(index) == expected(path, 40)
    assert not default_cache.exists() and not (tmp_path / value).exists()


def test_a_waiter_whose_lock_file_was_removed_takes_a_new_one(tmp_path, cache):
    """A failed builder removes its lock file: a process that was waiting on that file must
    not build under it (a third one would take a new file and build beside it)."""
    import fcntl
    import threading
    import time

    path = lines_file(tmp_path)
    key = jsonl_cache.cache_key([path], [["d"], ["40"], False, 0])
    cache.mkdir(mode=0o700)
    lock_path = cache / f"{key}.lock"
    built: list = []
    findable: list[bool] = []  # whether the lock file the builder held was the one at its path
    real_publish = node_cache._publish

    def watched_publish(final, write):
        findable.append(lock_path.exists())
        real_publish(final, write)

    node_cache._publish = watched_publish
    try:
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            waiter = threading.Thread(target=lambda: built.append(JsonlIndex([path], ["d"], [40])))
            waiter.start()
            time.sleep(0.5)
            lock_path.unlink()  # as a failed builder leaves it
            fcntl.flock(lock, fcntl.LOCK_UN)
        waiter.join(timeout=60)
    finally:
        node_cache._publish = real_publish
    assert texts(built[0]) == expected(path, 40)
    assert findable == [True]  # the waiter built under a lock file others can find
    assert not lock_path.exists()  # and removed it once the index was published


def test_folder_arrays_are_refused_unless_whole_and_inside_the_inputs():
    fits = jsonl_cache.JSONL.fits
    good = (np.asarray([0, 50], np.int64), np.asarray([0, 1], np.int32), np.asarray([0, 0], np.int32))
    assert fits(good, [100])
    assert not fits((good[0], good[1], np.asarray([0, 1], np.int32)), [100])  # file id 1 of one input
    assert not fits((np.asarray([0, 100], np.int64), good[1], good[2]), [100])  # an offset at the file's end
    assert not fits((good[0], np.asarray([0, -1], np.int32), good[2]), [100])  # a negative line number
    assert not fits((good[0], good[1], np.asarray([0, 0, 0], np.int32)), [100])  # lengths differ


def test_a_folder_array_of_another_type_is_not_mapped(tmp_path):
    np.save(tmp_path / "offsets.npy", np.asarray([0, 50], np.int32))  # int32, not int64
    np.save(tmp_path / "line_numbers.npy", np.asarray([0, 1], np.int32))
    np.save(tmp_path / "file_ids.npy", np.asarray([0, 0], np.int32))
    assert jsonl_cache.checked_arrays(str(tmp_path), [100]) is None


def test_an_input_that_cannot_be_told_unchanged_keys_no_folder():
    assert jsonl_cache._key([None, ["/d/a.jsonl", 1, 2, None, "x"]], {}, jsonl_cache.JSONL) is None


def test_a_build_error_other_than_no_room_is_raised_not_built_again_in_memory(tmp_path):
    def build(work, allocate):
        if work is not None:
            raise OSError(errno.EIO, "Input/output error")
        return allocate(0)

    with pytest.raises(OSError, match="Input/output"):
        jsonl_cache.in_memory(str(tmp_path / "work"), build)


def test_a_rewrite_in_place_with_its_time_put_back_changes_the_key(tmp_path):
    import shutil

    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"n": 1}\n' * 10)
    before = jsonl_cache.cache_key([str(path)], {})
    copy = tmp_path / "copy.jsonl"
    shutil.copy2(path, copy)  # the same bytes and mtime (`cp -p`), another inode
    os.replace(copy, path)
    assert jsonl_cache.cache_key([str(path)], {}) != before
