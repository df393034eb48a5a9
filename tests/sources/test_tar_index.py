"""A tar's member index (`sources/tar_index.py`): built once per node in the index cache,
mapped after, rebuilt when damaged or when the tar changes; blocks that cover every sample's
members; a tar read through a store with a round trip per read lists in few reads."""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np
import pytest

from bagel_bench.slow_reads import DelayedFile, OpenCounter, delayed_storage
from bagel_data.errors import SkipReason
from bagel_data.sources import jsonl_cache, tar_index, tar_members
from bagel_data.sources.tar_index import TarIndex
from helpers.prepare_inputs import t2i_tar


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv(jsonl_cache.ENV, str(root))
    return root


@pytest.fixture()
def listings(monkeypatch) -> list[str]:
    """The tars actually listed (walked header by header) in this process."""
    calls: list[str] = []
    real = tar_index.list_tar

    def counting(path):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(tar_index, "list_tar", counting)
    return calls


def _members(path) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        return {info.name: archive.extractfile(info).read() for info in archive if info.isfile()}  # type: ignore[union-attr]


def test_the_index_is_built_once_then_mapped(tmp_path, cache, listings):
    tar = str(t2i_tar(tmp_path / "a.tar", 9))
    first, second = TarIndex(tar), TarIndex(tar)
    assert listings == [tar]
    assert first.folder is not None and first.folder == second.folder and first.folder.startswith(str(cache))
    assert np.array_equal(first.samples, second.samples) and len(first) == 10
    assert [first.key(i) for i in (0, 9)] == ["k/0000", "k/lonely"]
    assert first.problem(9) == (SkipReason.CAPTION_WITHOUT_IMAGE, "no image file with this key")
    assert first.problem(3) is None  # no caption: the captions' rule, applied when read


def test_a_damaged_index_is_built_again(tmp_path, cache, listings):
    tar = str(t2i_tar(tmp_path / "a.tar", 9))
    folder = TarIndex(tar).folder
    assert folder is not None
    samples = np.load(os.path.join(folder, "samples.npy"), mmap_mode="r+")
    samples["image_at"][:] = 1 << 40  # members past the tar's end: a garbage file
    samples.flush()
    del samples
    again = TarIndex(tar)
    assert listings == [tar, tar]
    assert again.parts(0, 0, again.read_block(0))[0] == _members(tar)["k/0000.jpg"]


def test_a_changed_tar_gets_a_new_index(tmp_path, cache, listings):
    tar = str(t2i_tar(tmp_path / "a.tar", 9))
    assert len(TarIndex(tar)) == 10
    t2i_tar(tmp_path / "a.tar", 5)
    assert len(TarIndex(tar)) == 6 and listings == [tar, tar]


def test_without_a_cache_the_index_lives_in_memory(tmp_path, monkeypatch, listings):
    monkeypatch.setenv(jsonl_cache.ENV, "off")
    tar = str(t2i_tar(tmp_path / "a.tar", 3))
    index = TarIndex(tar)
    assert index.folder is None and len(index) == 4


@pytest.mark.parametrize("block_bytes, blocks", [(512, range(12, 13)), (8000, range(2, 10)), (1 << 22, range(1, 2))])
def test_blocks_cover_every_sample_in_order_and_cut_its_members(tmp_path, cache, monkeypatch, block_bytes, blocks):
    monkeypatch.setattr(tar_index, "BLOCK_BYTES", block_bytes)
    tar = str(t2i_tar(tmp_path / "a.tar", 12))
    index, members = TarIndex(tar), _members(tar)
    assert [block.first for block in index.blocks] == [0, *(block.stop for block in index.blocks[:-1])]
    assert index.blocks[-1].stop == len(index)
    assert len(index.blocks) in blocks  # samples of about 3 KB; a refused key joins the block before it
    for number, block in enumerate(index.blocks):
        assert block.end - block.start <= block_bytes + max(len(data) for data in members.values()) + 1024
        data = index.read_block(number)
        for sample in range(block.first, block.stop):
            key = index.key(sample)
            if index.problem(sample) is None:
                image, txt, js, _ = index.parts(sample, number, data)
                assert image == members[f"{key}.jpg"]
                assert (txt, js) == (members.get(f"{key}.txt"), members.get(f"{key}.json"))


def test_a_truncated_tar_cannot_be_listed_as_prepare_says(tmp_path, cache):
    tar = t2i_tar(tmp_path / "a.tar", 9)
    tar.write_bytes(tar.read_bytes()[:3000])
    with pytest.raises(tarfile.ReadError, match="unexpected end of data"):
        TarIndex(str(tar))


def test_listing_through_a_store_costs_a_read_per_window_not_per_member(tmp_path, monkeypatch):
    """Each read of a `DelayedFile` is one round trip of an object store."""
    tar = tmp_path / "a.tar"
    with tarfile.open(tar, "w") as archive:
        for index in range(400):
            info = tarfile.TarInfo(f"{index:04d}.jpg")
            info.size = 3000
            archive.addfile(info, io.BytesIO(bytes(3000)))
    reads = []
    original = DelayedFile.read

    def counted(self, size=-1):
        reads.append(size)
        return original(self, size)

    monkeypatch.setattr(DelayedFile, "read", counted)
    monkeypatch.setattr(tar_members, "LISTING_WINDOW", 256 << 10)
    with delayed_storage(0.0):
        keyed = tar_members.list_tar(str(tar))
    assert len(keyed) == 400
    assert len(reads) <= tar.stat().st_size // (256 << 10) + 2, len(reads)


def test_blocks_reuse_one_open_handle(tmp_path, cache, monkeypatch):
    """Reading every block of a tar opens it once (a store's HEAD and connection, not one per
    block); a read that fails drops its handle, and the next block opens a fresh one."""
    monkeypatch.setattr(tar_index, "BLOCK_BYTES", 1 << 12)
    tar = str(t2i_tar(tmp_path / "a.tar", 9))
    index = TarIndex(tar)
    assert len(index.blocks) > 2
    opens = OpenCounter()
    with delayed_storage(opens=opens):
        for block in range(len(index.blocks)):
            index.read_block(block)
    assert sum(opens.counts.values()) == 1
    lost = index.blocks[1]
    with delayed_storage(fail={tar: (lost.start, lost.start + 1)}, opens=opens):
        fresh = TarIndex(tar)
        fresh.read_block(0)
        with pytest.raises(OSError, match="injected"):
            fresh.read_block(1)
        fresh.read_block(2)
    assert sum(opens.counts.values()) == 1 + 2  # the failed handle was not put back


def test_a_store_tar_known_by_its_listing_costs_no_request_on_a_warm_cache(tmp_path, cache):
    """The index cache tells a remote tar current by its size and the store's modification
    time: from its folder's listing, no request; without one, a HEAD. Its content is not
    digested (a HEAD and about 18 ranged reads per tar before)."""
    pytest.importorskip("moto.server")
    from bagel_bench.moto_store import moto_store
    from bagel_data.sources import storage

    folder = tmp_path / "tars"
    folder.mkdir()
    t2i_tar(folder / "a.tar", 400)  # over the digest's whole-file limit
    with moto_store() as store:
        store.upload(folder, "s3://wds-id/tars")
        store.register("s3://wds-id")
        uri = "s3://wds-id/tars/a.tar"
        [(_, size, mtime)] = storage.list_entries("s3://wds-id/tars")
        built = TarIndex(uri, (size, mtime))
        store.proxy.counter.reset()
        warm = TarIndex(uri, (size, mtime))
        listed = store.proxy.counter.reset()
        headed = TarIndex(uri)
        head = store.proxy.counter.reset()
        with pytest.raises(FileNotFoundError):
            TarIndex("s3://wds-id/tars/missing.tar")
    assert warm.folder == built.folder == headed.folder is not None
    assert listed == {} and head == {"HEAD object": 1}, (listed, head)
    assert len(warm) == 401


def test_a_remote_tar_is_known_by_path_size_and_store_time_a_local_one_is_not(monkeypatch):
    """A rewrite on a store changes the size or the store-set time: either one is a new key.
    A local tar gets no listed identity (local times can be set back: it is digested); none
    at all while `LISTED_IDENTITY` is off (the digest keys it then)."""
    known = tar_index.listed_identity("s3://b/t/a.tar", (10, 5))
    assert known == ["s3://b/t/a.tar", 10, 5, "listed"]
    assert tar_index.listed_identity("s3://b/t/a.tar", (10, 6)) != known
    assert tar_index.listed_identity("s3://b/t/a.tar", (11, 5)) != known
    assert tar_index.listed_identity("s3://b/t/b.tar", (10, 5)) != known
    assert tar_index.listed_identity("/data/a.tar", (10, 5)) is None
    assert tar_index.listed_identity("file:///data/a.tar", (10, 5)) is None
    monkeypatch.setattr(tar_index, "LISTED_IDENTITY", False)
    assert tar_index.listed_identity("s3://b/t/a.tar", (10, 5)) is None


def test_kept_handles_are_closed_before_the_process_forks(tmp_path, cache):
    """A DataLoader's workers fork from this process: a store's client and its connections
    must not be shared with them, so the handles kept for the next blocks close first."""
    tar = str(t2i_tar(tmp_path / "a.tar", 9))
    index = TarIndex(tar)
    index.read_block(0)
    assert len(index._idle) == 1
    pid = os.fork()
    if pid == 0:
        os._exit(0 if not index._idle else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and index._idle == []
    assert index.read_block(0) and len(index._idle) == 1  # opened again when next read
