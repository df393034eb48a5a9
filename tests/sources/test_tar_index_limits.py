"""The tar index's arithmetic at its limits (`sources/tar_index.py`): the checks a cached
index must pass, which samples share a block, which byte ranges a block reads, and the text
of keys and reasons, each tested one byte either side of where a plausible bug would cut."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest

from bagel_data.errors import SkipReason
from bagel_data.sources import jsonl_cache, tar_index
from bagel_data.sources.tar_index import PROBLEMS, SAMPLE, TarIndex, _blocks, _fits, _reads

NONE = (-1, 0)


def _samples(rows: list[dict]) -> np.ndarray:
    """Index rows: per sample `image`/`txt`/`json` as (at, size) (absent: NONE), `problem`."""
    samples = np.zeros(len(rows), SAMPLE)
    for index, row in enumerate(rows):
        samples[index]["problem"] = row.get("problem", 0)
        for part in tar_index.PARTS:
            samples[index][f"{part}_at"], samples[index][f"{part}_size"] = row.get(part, NONE)
        samples[index]["text_at"], samples[index]["key_len"], samples[index]["text_len"] = row.get("text", (0, 1, 1))
    return samples


def test_a_cached_index_fits_up_to_the_tar_s_last_byte_and_no_further():
    text = np.zeros(4, np.uint8)
    ok = _samples([{"image": (512, 100)}, {"image": (1536, 464), "text": (1, 3, 3)}])
    assert _fits((ok, text), [2000])  # the last member ends on the tar's last byte
    assert not _fits((ok, text), [1999])
    assert _fits((_samples([{"text": (0, 4, 4)}]), text), [10])  # text to its very end
    for bad in (
        {"text": (1, 4, 4)},  # text past the end
        {"text": (-1, 1, 1)},
        {"text": (0, 3, 2)},  # a key longer than its text
        {"image": (-2, 0)},
        {"problem": len(PROBLEMS)},
        {"problem": -1},
    ):
        assert not _fits((_samples([{"image": (512, 10)}, bad]), text), [2000]), bad
    assert _fits((_samples([{"problem": len(PROBLEMS) - 1}]), text), [10])


def test_the_sampled_check_looks_at_the_first_and_the_last_sample(monkeypatch):
    monkeypatch.setattr(tar_index, "_CHECKED", 3)
    text = np.zeros(1, np.uint8)
    rows = [{"image": (512, 10)}] * 50
    for spoiled in (0, 49):
        samples = _samples(rows)
        samples[spoiled]["image_at"] = 1 << 40
        assert not _fits((samples, text), [4096]), spoiled


def test_a_refused_key_joins_the_block_before_it_and_a_block_starts_at_its_stretch(monkeypatch):
    monkeypatch.setattr(tar_index, "BLOCK_BYTES", 1000)
    refused = {"problem": PROBLEMS.index(SkipReason.NO_CAPTION) if SkipReason.NO_CAPTION in PROBLEMS else 1}
    rows = [
        refused,  # a refused key first: block 0, reading nothing of its own
        {"image": (512, 100), "txt": (1024, 10)},
        refused,
        {"image": (999, 1)},  # first byte 999: still the first stretch
        {"image": (1000, 50)},  # first byte 1000: the next block
        refused,
        {"image": (2600, 10)},
    ]
    blocks = _blocks(_samples(rows))
    assert [(b.first, b.stop) for b in blocks] == [(0, 4), (4, 6), (6, 7)]
    assert (blocks[0].start, blocks[0].end) == (512, 1034)
    assert (blocks[1].start, blocks[1].end) == (1000, 1050) and blocks[1].reads == ((1000, 1050),)
    assert blocks[2].nbytes == 10


def test_a_block_of_refused_keys_reads_nothing():
    blocks = _blocks(_samples([{"problem": 1}, {"problem": 2}]))
    assert [(b.first, b.stop, b.start, b.end, b.reads, b.nbytes) for b in blocks] == [(0, 2, 0, 0, (), 0)]
    assert _blocks(_samples([])) == []


def test_members_at_most_gap_bytes_apart_share_a_read(monkeypatch):
    monkeypatch.setattr(tar_index, "GAP_BYTES", 100)
    usable = np.ones(3, bool)
    block_of = np.zeros(3, np.int64)

    def reads(second_at: int, third_at: int) -> tuple:
        rows = [{"image": (512, 88), "txt": (second_at, 10)}, {"image": (third_at, 20)}, {"problem": 1}]
        return _reads(_samples(rows), block_of, usable & (np.arange(3) < 2))[0]

    assert reads(700, 810) == ((512, 830),)  # gaps of exactly 100: one read
    assert reads(701, 812) == ((512, 600), (701, 711), (812, 832))  # 101: apart
    # Listed out of order (a key's .txt before its .jpg): sorted before merging.
    assert reads(2000, 610) == ((512, 630), (2000, 2010))


def test_reads_keep_blocks_apart_even_when_adjacent(monkeypatch):
    rows = [{"image": (512, 100)}, {"image": (1024, 100)}]
    got = _reads(_samples(rows), np.array([0, 1]), np.ones(2, bool))
    assert got == {0: ((512, 612),), 1: ((1024, 1124),)}


@pytest.fixture()
def tar(tmp_path, monkeypatch):
    """A tar of keys with neighbouring names, one of them refused (a caption alone)."""
    monkeypatch.setenv(jsonl_cache.ENV, str(tmp_path / "cache"))
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w") as archive:
        for name, data in [("é/0.jpg", b"J0" * 300), ("é/0.txt", b"t0"), ("x/lonely.txt", b"alone"),
                           ("é/10.jpg", b"J1" * 300), ("é/10.json", b'{"caption": "j"}'), ("b\udcff.jpg", b"J2")]:  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return str(path)


def test_keys_and_reasons_come_back_whole_and_apart(tar):
    index = TarIndex(tar)
    assert [index.key(i) for i in range(len(index))] == ["é/0", "x/lonely", "é/10", "b\udcff"]
    assert [index.problem(i) for i in (0, 2, 3)] == [None, None, None]
    assert index.problem(1) == (SkipReason.CAPTION_WITHOUT_IMAGE, "no image file with this key")
    data = index.read_block(0)
    assert index.parts(0, 0, data) == (b"J0" * 300, b"t0", None, None)  # image, .txt, .json, .cls
    assert index.parts(2, 0, data) == (b"J1" * 300, None, b'{"caption": "j"}', None)
    assert index.parts(3, 0, data) == (b"J2", None, None, None)


def test_a_block_read_short_of_its_range_is_an_error(tar):
    index = TarIndex(tar)
    end = index.blocks[0].end
    with open(tar, "r+b") as handle:
        handle.truncate(end - 1)
    with pytest.raises(OSError, match=r"read \d+ of \d+ bytes"):
        index.read_block(0)


def test_a_member_outside_every_read_range_is_a_bug_not_bytes_of_a_neighbour():
    with pytest.raises(ValueError, match="in no range"):
        tar_index._cut(((100, b"x" * 50),), 140, 11)  # one byte past the piece
    assert tar_index._cut(((100, b"a" * 40 + b"b" * 10),), 140, 10) == b"b" * 10  # the piece's last bytes


def test_a_read_range_ends_at_its_furthest_member_however_they_are_listed():
    rows = [{"image": (512, 1000), "txt": (600, 10)}]  # a member inside another (a forged index)
    assert _reads(_samples(rows), np.zeros(1, np.int64), np.ones(1, bool)) == {0: ((512, 1512),)}


def test_a_block_of_several_reads_spans_from_the_first_to_the_last(monkeypatch):
    monkeypatch.setattr(tar_index, "GAP_BYTES", 10)
    blocks = _blocks(_samples([{"image": (512, 10), "txt": (1024, 10)}, {"image": (2048, 5)}]))
    assert [(b.start, b.end, b.reads, b.nbytes) for b in blocks] == [
        (512, 2053, ((512, 522), (1024, 1034), (2048, 2053)), 25)
    ]


def test_an_index_listed_by_older_rules_is_not_mapped(tmp_path, monkeypatch):
    """The rules' version keys the cache: an index from before damage was counted (it stopped
    at the first bad header) is listed again, not trusted."""
    monkeypatch.setenv(jsonl_cache.ENV, str(tmp_path / "cache"))
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w") as archive:
        info = tarfile.TarInfo("k.jpg")
        info.size = 3
        archive.addfile(info, io.BytesIO(b"abc"))
    listed = []
    real = tar_index.list_tar
    monkeypatch.setattr(tar_index, "list_tar", lambda p: listed.append(p) or real(p))
    monkeypatch.setattr(tar_index, "RULES", 1)
    TarIndex(str(path))
    TarIndex(str(path))
    monkeypatch.setattr(tar_index, "RULES", 2)
    TarIndex(str(path))
    assert len(listed) == 2
