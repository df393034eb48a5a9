"""Remote videos' tables kept on the node (bagel_data.media.video_tables)."""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bagel_data.media import video, video_tables
from bagel_data.media.video_probe import FrameTable
from bagel_data.sources import jsonl_cache, storage
from helpers.videos import has_x264, make_h264

needs_x264 = pytest.mark.skipif(not has_x264(), reason="this PyAV wheel has no libx264")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "node-cache"
    monkeypatch.setenv(jsonl_cache.ENV, str(root))
    video._TABLES.clear()
    yield root / video_tables.FOLDER
    video._TABLES.clear()


@pytest.fixture
def fetched(monkeypatch) -> dict[str, int]:
    """Bytes read from memory:// objects, as an object store bills them."""
    tally = {"bytes": 0}
    original = storage.open_input

    class Counting(io.RawIOBase):
        def __init__(self, inner):
            self.inner = inner

        def readable(self):
            return True

        def seekable(self):
            return True

        def seek(self, offset, whence=0):
            return self.inner.seek(offset, whence)

        def tell(self):
            return self.inner.tell()

        def readinto(self, buffer):
            data = self.inner.read(len(buffer))
            buffer[: len(data)] = data
            tally["bytes"] += len(data)
            return len(data)

    def open_input(path):
        handle = original(path)
        return io.BufferedReader(Counting(handle), 1 << 12) if path.startswith("memory://") else handle

    monkeypatch.setattr(storage, "open_input", open_input)
    return tally


def _put(name: str, local: str) -> str:
    fsspec.filesystem("memory").pipe(f"/video-tables/{name}", Path(local).read_bytes())
    return f"memory://video-tables/{name}"


F = video_tables._FORMAT


def _table(count=5, rate=24.0, pts: object = "steady", seek=(0, 8)) -> FrameTable:
    """A table of `count` frames, 4 ticks apart unless `pts` says."""
    pts = range(0, 4 * count, 4) if isinstance(pts, str) else pts
    frame_pts = None if pts is None else np.asarray(pts, np.int64)
    return FrameTable(count, rate, frame_pts, np.asarray(seek, np.int64))


def _same(a: FrameTable, b: FrameTable) -> bool:
    pts_same = (a.frame_pts is None and b.frame_pts is None) or (
        a.frame_pts is not None and b.frame_pts is not None and a.frame_pts.tolist() == b.frame_pts.tolist()
    )
    return a.count == b.count and a.rate == b.rate and pts_same and a.seek_pts.tolist() == b.seek_pts.tolist()


@settings(max_examples=100, deadline=None)
@given(
    first=st.integers(-(2**40), 2**40),
    steps=st.lists(st.integers(0, 2**20), max_size=40),
    seek=st.lists(st.integers(-(2**40), 2**41), max_size=6),
    count=st.integers(0, 10**6),
    rate=st.floats(0.01, 1000),
    has_pts=st.booleans(),
)
def test_a_written_table_reads_back_the_same(tmp_path_factory, first, steps, seek, count, rate, has_pts):
    pts = np.cumsum([first, *steps]) if has_pts else None
    table = _table(len(pts) if pts is not None else count, rate, pts, sorted(seek))
    file = str(tmp_path_factory.mktemp("tables") / "t.npz")
    video_tables.write_table(file, table)
    assert _same(video_tables.read_table(file), table)


@pytest.mark.parametrize(
    "damage",
    [
        lambda file: Path(file).write_bytes(Path(file).read_bytes()[:-30]),  # cut short
        lambda file: Path(file).write_bytes(b"not a table"),
        lambda file: np.savez(file, header=np.asarray([99, 5, 1]), rate=[24.0], steps=[0, 4], seek=[0]),  # format
        lambda file: np.savez(file, header=np.asarray([F, 3, 1]), rate=[24.0], steps=[0, 4, -1], seek=[0]),
        lambda file: np.savez(file, header=np.asarray([F, 2, 1]), rate=[24.0], steps=[0, 4], seek=[8, 0]),
        lambda file: np.savez(file, header=np.asarray([F, 2, 0]), rate=[24.0], steps=[0, 4], seek=[0]),
        lambda file: np.savez(file, header=np.asarray([F, 2, 1]), rate=[0.0], steps=[0, 4], seek=[0]),
        # a count that disagrees with the timestamps stored beside it
        lambda file: np.savez(file, header=np.asarray([F, 10**10, 1]), rate=[24.0], steps=[0, 4], seek=[0]),
        lambda file: np.savez(file, header=np.asarray([F, 1, 1]), rate=[24.0], steps=[0, 4], seek=[0]),
    ],
)
def test_a_damaged_table_is_not_used_and_is_counted(tmp_path, damage):
    file = str(tmp_path / "t.npz")
    video_tables.write_table(file, _table())
    damage(file)
    before = video_tables.table_counts().get("damaged", 0)
    assert video_tables.read_table(file) is None
    assert video_tables.table_counts()["damaged"] == before + 1


def test_a_damaged_table_is_built_again(cache):
    handle = io.BytesIO(b"video bytes" * 100)
    video_tables.shared_table("memory://x/v.mkv", handle, _table)
    (stored,) = list(cache.glob("*.npz"))
    stored.write_bytes(b"garbage")
    again = video_tables.shared_table("memory://x/v.mkv", handle, lambda: _table(count=7))
    assert again.count == 7
    assert video_tables.read_table(str(stored)).count == 7


def test_one_demux_per_node_while_many_ask_at_once(cache):
    calls = []

    def demux() -> FrameTable:
        calls.append(1)
        time.sleep(0.2)  # long enough that every other thread asks while this one builds
        return _table()

    results: list[FrameTable] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(video_tables.shared_table("memory://x/v.mkv", io.BytesIO(b"v" * 50), demux))
        )
        for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(results) == 6
    assert all(_same(result, _table()) for result in results)
    assert [name for name in os.listdir(cache) if not name.endswith(".npz")] == []  # no lock left


def test_other_bytes_at_the_same_path_get_their_own_table(cache):
    demuxed = []

    def demux(count):
        return lambda: demuxed.append(count) or _table(count=count)

    first = video_tables.shared_table("memory://x/v.mkv", io.BytesIO(b"a" * 40000), demux(5))
    tail_changed = video_tables.shared_table("memory://x/v.mkv", io.BytesIO(b"a" * 39999 + b"b"), demux(6))
    head_changed = video_tables.shared_table("memory://x/v.mkv", io.BytesIO(b"b" + b"a" * 39999), demux(7))
    longer = video_tables.shared_table("memory://x/v.mkv", io.BytesIO(b"a" * 40001), demux(8))
    elsewhere = video_tables.shared_table("memory://x/w.mkv", io.BytesIO(b"a" * 40000), demux(9))
    again = video_tables.shared_table("memory://x/v.mkv", io.BytesIO(b"a" * 40000), demux(10))
    assert [t.count for t in (first, tail_changed, head_changed, longer, elsewhere, again)] == [5, 6, 7, 8, 9, 5]
    assert demuxed == [5, 6, 7, 8, 9]


def test_with_the_cache_off_every_process_demuxes(monkeypatch, tmp_path):
    monkeypatch.setenv(jsonl_cache.ENV, "off")
    before = video_tables.table_counts().get("unshared", 0)
    for count in (3, 4):
        assert (
            video_tables.shared_table("memory://x/v.mkv", io.BytesIO(b"v"), lambda c=count: _table(count=c)).count
            == count
        )
    assert video_tables.table_counts()["unshared"] == before + 2


@needs_x264
def test_a_second_reader_of_a_remote_matroska_fetches_only_what_it_decodes(cache, fetched, tmp_path):
    local = make_h264(tmp_path / "long.mkv", 1200, gop=24, bframes=2)
    uri = _put("long.mkv", local)
    sampler = video.FrameSampler(max_num_frames=2, min_num_frames=2, sample="middle")
    try:
        first = sampler(uri, np.random.default_rng(0))
        cold = fetched["bytes"]
        video._TABLES.clear()  # another process of the node: nothing in its memory
        second = sampler(uri, np.random.default_rng(0))
        warm = fetched["bytes"] - cold
    finally:
        fsspec.filesystem("memory").rm("/video-tables/long.mkv")
    size = os.path.getsize(local)
    assert cold > size  # the first reader demuxes the whole file, then decodes
    assert warm < 0.4 * size, (warm, size)  # the decoder reads 32 KiB at a time
    local_frames = sampler(local, np.random.default_rng(0))
    for frames in (first, second):
        assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(frames, local_frames))


@pytest.mark.parametrize("errno_", [28, 27, 122])  # ENOSPC, EFBIG (ulimit -f), EDQUOT
def test_a_cache_that_cannot_store_keeps_the_table_in_memory_with_one_warning(cache, monkeypatch, errno_):
    from bagel_data.errors import IndexCacheWarning
    from bagel_data.sources import node_cache

    def full(file, table):
        raise OSError(errno_, os.strerror(errno_))

    monkeypatch.setattr(video_tables, "write_table", full)
    monkeypatch.setattr(node_cache, "_warned", set())
    before = video_tables.table_counts().get("unstored", 0)
    with pytest.warns(IndexCacheWarning, match="cannot be stored") as caught:
        for count in (3, 4):  # two files: each still gets its table
            table = video_tables.shared_table(
                f"memory://x/v{count}.mkv", io.BytesIO(b"v" * count), lambda c=count: _table(count=c)
            )
            assert table.count == count
    assert len([w for w in caught if issubclass(w.category, IndexCacheWarning)]) == 1
    assert video_tables.table_counts()["unstored"] == before + 2
    assert not list(cache.glob("*.lock"))  # no lock file left behind


def test_a_tables_key_reads_a_small_file_and_changes_with_its_tail_and_time(tmp_path):
    small = io.BytesIO(b"tiny video")  # under the 16 KiB read at each end
    assert video_tables.table_key("/d/tiny.mkv", small).startswith("video-") and small.tell() == 0
    data = bytearray(os.urandom(1 << 16))
    key = video_tables.table_key("/d/a.mkv", io.BytesIO(bytes(data)))
    data[-1] ^= 1  # a remux rewrote the Cues at the end
    assert video_tables.table_key("/d/a.mkv", io.BytesIO(bytes(data))) != key
    path = tmp_path / "b.mkv"
    path.write_bytes(bytes(data))
    first = video_tables.table_key(str(path), io.BytesIO(bytes(data)))
    os.utime(path, ns=(1, 2))  # rewritten with the same bytes at both ends and size
    assert video_tables.table_key(str(path), io.BytesIO(bytes(data))) != first


def test_a_table_not_built_yet_is_none_and_not_counted_damaged(tmp_path):
    before = video_tables.table_counts().get("damaged", 0)
    assert video_tables.read_table(str(tmp_path / "none.npz")) is None
    assert video_tables.table_counts().get("damaged", 0) == before


def test_a_stored_table_may_start_before_zero_but_not_claim_more_frames_than_timestamps(tmp_path):
    path = str(tmp_path / "t.npz")
    video_tables.write_table(path, FrameTable(3, 24.0, np.asarray([-5, -3, 0], np.int64), np.asarray([-5], np.int64)))
    assert video_tables.read_table(path).frame_pts.tolist() == [-5, -3, 0]
    arrays = {"rate": np.asarray([24.0]), "steps": np.asarray([0, 1, 1], np.int64), "seek": np.zeros(1, np.int64)}
    assert video_tables._checked(header=np.asarray([video_tables._FORMAT, 10**10, 1], np.int64), **arrays) is None


def test_a_table_is_demuxed_once_and_counted_shared_only_where_read_from_the_cache(cache, monkeypatch):
    from bagel_data.sources import node_cache

    demuxes: list[int] = []

    def demux() -> FrameTable:
        demuxes.append(1)
        return _table(count=6)

    counts = video_tables.table_counts
    before = {key: counts().get(key, 0) for key in ("demuxed", "shared", "unstored")}
    video_tables.shared_table("memory://x/a.mkv", io.BytesIO(b"a" * 100), demux)  # built here
    video_tables.shared_table("memory://x/a.mkv", io.BytesIO(b"a" * 100), demux)  # read from the cache
    assert len(demuxes) == 1
    assert counts()["demuxed"] == before["demuxed"] + 1 and counts()["shared"] == before["shared"] + 1

    def full(file, table):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(video_tables, "write_table", full)
    monkeypatch.setattr(node_cache, "_warned", set())
    with pytest.warns(Warning):
        assert video_tables.shared_table("memory://x/b.mkv", io.BytesIO(b"b" * 100), demux).count == 6
    assert len(demuxes) == 2  # demuxed once, though it could not be stored
