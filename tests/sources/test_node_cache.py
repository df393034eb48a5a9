"""The node cache's one build-under-lock (`node_cache.build_shared`) and its root's rules,
as the JSONL index, the tar index and the remote video tables all use them."""

from __future__ import annotations

import errno
import io
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from bagel_data.errors import IndexCacheWarning
from bagel_data.media import video, video_tables
from bagel_data.media.video_probe import FrameTable
from bagel_data.sources import jsonl_cache, node_cache
from bagel_data.sources.jsonl import JsonlIndex

SRC = Path(__file__).resolve().parents[2] / "src" / "bagel_data"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "node-cache"
    monkeypatch.setenv(node_cache.ENV, str(root))
    monkeypatch.setattr(node_cache, "_warned", set())
    video._TABLES.clear()
    yield root
    video._TABLES.clear()


def _table(count: int = 5) -> FrameTable:
    return FrameTable(count, 24.0, np.arange(count, dtype=np.int64) * 4, np.asarray([0], np.int64))


def _lines(tmp_path, count: int = 40) -> str:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"".join(b'{"n": %d}\n' % (i * 7919 % 1000) for i in range(count)))
    return str(path)


def test_file_locks_are_taken_in_the_node_cache_only():
    """One build-under-lock: no other module takes a file lock or names a lock file."""
    takers = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if re.search(r"\bfcntl\b|\.lock\b|\blocked\(", path.read_text()) and path.name != "node_cache.py"
    )
    assert takers == []


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES])
def test_a_video_table_cache_it_cannot_write_keeps_the_table_in_memory_with_one_warning(cache, monkeypatch, code):
    def refused(file, table):
        raise OSError(code, os.strerror(code), file)

    monkeypatch.setattr(video_tables, "write_table", refused)
    demuxed: list[int] = []
    before = video_tables.table_counts().get("unstored", 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tables = [
            video_tables.shared_table(
                f"memory://x/v{i}.mkv", io.BytesIO(b"v" * 64), lambda: demuxed.append(1) or _table()
            )
            for i in range(3)
        ]
    assert [t.count for t in tables] == [5, 5, 5] and len(demuxed) == 3  # each demuxed once, none a skip
    assert [w.category for w in caught] == [IndexCacheWarning]
    assert os.strerror(code) in str(caught[0].message)
    assert video_tables.table_counts()["unstored"] == before + 3
    assert os.listdir(cache / video_tables.FOLDER) == []  # no lock, no half-written table


def test_a_damaged_file_is_built_again_and_a_dead_builders_work_is_cleared(cache):
    cache.mkdir(mode=0o700)
    final = str(cache / "thing")
    Path(final + ".tmp-999-1").write_text("a builder that died")
    Path(final).write_text("damaged")
    reads: list[str] = []

    def read(path: str):
        text = Path(path).read_text() if os.path.exists(path) else None
        reads.append(text or "")
        return text if text == "whole" else None

    assert node_cache.build_shared(final, read, lambda work: Path(work).write_text("whole")) == "whole"
    assert sorted(os.listdir(cache)) == ["thing"]  # no lock, no work file, no damaged copy
    assert node_cache.build_shared(final, read, lambda work: pytest.fail("built twice")) == "whole"


def test_a_failed_build_publishes_nothing_and_leaves_no_lock(cache):
    cache.mkdir(mode=0o700)
    final = str(cache / "thing")

    def failing(work: str) -> None:
        Path(work).write_text("half")
        raise OSError(errno.EFBIG, "File too large")

    with pytest.raises(OSError, match="File too large"):
        node_cache.build_shared(final, lambda path: None, failing)
    assert os.listdir(cache) == []


def test_a_group_writable_root_is_not_used(tmp_path, cache):
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o770)  # the group may plant files
    path = _lines(tmp_path)
    with pytest.warns(IndexCacheWarning, match=r"others can write it \(mode 770\)"):
        index = JsonlIndex([path], ["d"], [40])
    assert index._mapped is None and len(index) == 40
    assert os.listdir(cache) == []  # nothing written into it


def test_a_symlink_planted_at_the_default_root_is_not_followed(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir(mode=0o700)
    monkeypatch.delenv(node_cache.ENV, raising=False)
    monkeypatch.setattr(jsonl_cache.tempfile, "gettempdir", lambda: str(temp))
    monkeypatch.setattr(node_cache, "_warned", set())
    (temp / f"bagel-data-index-cache-{os.geteuid()}").symlink_to(elsewhere)
    path = _lines(tmp_path)
    with pytest.warns(IndexCacheWarning, match="not a folder"):
        index = JsonlIndex([path], ["d"], [40])
    assert index._mapped is None and len(index) == 40
    assert os.listdir(elsewhere) == []  # nothing written through the link


@pytest.mark.parametrize("value", ["off", "OFF", " Off ", "none", "0", ""])
def test_the_cache_is_off_in_any_case(monkeypatch, value):
    monkeypatch.setenv(node_cache.ENV, value)
    assert node_cache.cache_root() is None


def test_one_warning_per_root(monkeypatch):
    monkeypatch.setattr(node_cache, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for root in ("/a", "/a", "/b"):
            node_cache.warn_once(root, f"cannot use {root}")
    assert [str(w.message) for w in caught] == ["cannot use /a", "cannot use /b"]


def test_a_waiter_finds_what_another_process_built_and_builds_nothing(cache):
    cache.mkdir(mode=0o700)
    final = cache / "thing"
    final.write_text("built by another process")  # after this one's first look
    looks = []

    def read(path: str) -> str | None:
        looks.append(path)
        return None if len(looks) == 1 else Path(path).read_text()

    def write(work: str) -> None:
        raise AssertionError("built again")

    assert node_cache.build_shared(str(final), read, write) == "built by another process"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES])
def test_every_cannot_write_error_is_one(code):
    assert node_cache.cannot_write(OSError(code, os.strerror(code)))
    assert not node_cache.cannot_write(OSError(errno.EIO, "Input/output error"))
