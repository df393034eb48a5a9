"""Walking a tar's headers past damage (`sources/tar_walk.py`, through `tar_members.list_tar`):
garbage or zeros over a header lose only what they cover, counted as `tar_damaged` with the
byte range; a key split by damage is refused; a cut tar is still unreadable as a whole."""

from __future__ import annotations

import io
import tarfile

import pytest

from bagel_data.errors import RowDropped, SkipReason
from bagel_data.sources import tar_members, tar_walk
from bagel_data.sources.tar_members import TarSample, list_tar


def _tar(path, count: int = 20, parts=(".jpg", ".txt"), size: int = 1000) -> list[tuple[str, int]]:
    """`count` keys `NNNN` with `parts`; returns (member name, header offset) in tar order."""
    headers = []
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        for index in range(count):
            for ext in parts:
                info = tarfile.TarInfo(f"{index:04d}{ext}")
                info.size = size
                headers.append((info.name, archive.offset))
                archive.addfile(info, io.BytesIO(bytes([index + 1]) * size))
    return headers


def _overwrite(path, at: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(at)
        handle.write(data)


def _outcomes(path) -> dict[str, str]:
    return {key: (value.reason.value if isinstance(value, RowDropped) else "ok") for key, value in list_tar(str(path))}


def test_garbage_over_a_middle_header_loses_that_member_only(tmp_path):
    path = tmp_path / "a.tar"
    headers = dict(_tar(path))
    at = headers["0010.jpg"]
    _overwrite(path, at, bytes(range(256)) * 2)
    got = _outcomes(path)
    damaged = [key for key, outcome in got.items() if key.startswith("<damaged")]
    assert damaged == [f"<damaged bytes {at}-{at + 512 + 1024}>"]  # the header and its data's two blocks
    assert got["0010"] == SkipReason.CAPTION_WITHOUT_IMAGE.value  # its .txt survived alone: counted
    assert [key for key, outcome in got.items() if outcome == "ok"] == [f"{i:04d}" for i in range(20) if i != 10]
    assert got[damaged[0]] == SkipReason.TAR_DAMAGED.value


def test_a_zeroed_4_kib_block_is_counted_and_the_tail_is_read(tmp_path):
    path = tmp_path / "a.tar"
    headers = dict(_tar(path))
    start = headers["0008.txt"] // 4096 * 4096
    _overwrite(path, start, bytes(4096))
    got = _outcomes(path)
    ok = [key for key, outcome in got.items() if outcome == "ok"]
    assert ok[-1] == "0019" and len(ok) >= 17  # read on past the zeros to the end
    assert sum(outcome == SkipReason.TAR_DAMAGED.value for outcome in got.values()) >= 1
    lost = [f"{i:04d}" for i in range(20) if f"{i:04d}" not in got]
    damaged = next(key for key in got if key.startswith("<damaged"))
    low, high = map(int, damaged[len("<damaged bytes ") : -1].split("-"))
    for key in lost:  # a key that is gone had every member inside the damaged stretch
        assert all(low <= at < high for name, at in headers.items() if name.startswith(key)), key


def test_a_key_whose_members_lie_on_both_sides_of_damage_is_refused(tmp_path):
    path = tmp_path / "a.tar"
    headers = dict(_tar(path, parts=(".jpg", ".cls", ".txt")))
    _overwrite(path, headers["0005.cls"], b"\xff" * 512)  # between the key's .jpg and .txt
    got = list_tar(str(path))
    outcome = dict(got)["0005"]
    assert isinstance(outcome, RowDropped) and outcome.reason is SkipReason.TAR_DAMAGED
    assert "both sides of damaged bytes" in outcome.detail
    assert all(isinstance(value, TarSample) for key, value in got if key not in ("0005",) and key[0] != "<")


def test_damage_at_the_first_header_and_over_the_last_are_counted(tmp_path):
    path = tmp_path / "a.tar"
    headers = _tar(path, count=5)
    _overwrite(path, 0, b"\x01" * 512)
    _overwrite(path, headers[-1][1], b"\x02" * 512)  # the last member's header
    got = list(_outcomes(path).items())
    assert got[0] == ("<damaged bytes 0-1536>", SkipReason.TAR_DAMAGED.value)  # a header and 1000 bytes
    assert got[1] == ("0000", SkipReason.CAPTION_WITHOUT_IMAGE.value)
    assert got[-1][1] == SkipReason.TAR_DAMAGED.value and got[-1][0].startswith(f"<damaged bytes {headers[-1][1]}-")
    assert dict(got)["0004"] == SkipReason.NO_CAPTION.value or dict(got)["0004"] == "ok"
    assert [key for key, outcome in got if outcome == "ok"] == ["0001", "0002", "0003", "0004"]


def test_the_end_of_archive_zeros_are_not_damage(tmp_path):
    path = tmp_path / "a.tar"
    _tar(path, count=3)
    got = _outcomes(path)
    assert got == {"0000": "ok", "0001": "ok", "0002": "ok"}
    with open(path, "ab") as handle:  # more zero records after the end: still an end
        handle.write(bytes(10240))
    assert _outcomes(path) == got


def test_a_forged_extended_header_size_is_damage_not_a_huge_read(tmp_path, monkeypatch):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as archive:
        for index in range(3):
            info = tarfile.TarInfo(f"{index:04d}.jpg")
            info.size = 100
            info.pax_headers = {"comment": "x" * 10}  # each member gets a pax header first
            archive.addfile(info, io.BytesIO(bytes(100)))
    assert _outcomes(path) == {"0000": "ok", "0001": "ok", "0002": "ok"}
    header = bytearray(path.read_bytes()[:512])
    header[124:136] = b"%011o\0" % (4 << 30)  # the pax header of 0000.jpg claims 4 GiB of records
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)  # with a checksum that checks out
    _overwrite(path, 0, bytes(header))
    reads = []
    real = tar_walk._Capped.read

    def counted(self, size=-1):
        data = real(self, size)
        reads.append(size)  # asked for, and granted
        return data

    monkeypatch.setattr(tar_walk._Capped, "read", counted)
    got = _outcomes(path)
    assert got == {"<damaged bytes 0-1024>": SkipReason.TAR_DAMAGED.value, "0000": "ok", "0001": "ok", "0002": "ok"}
    assert max(reads) <= tar_walk.EXTENDED_LIMIT


def test_a_member_over_the_size_limit_refuses_its_key(tmp_path, monkeypatch):
    path = tmp_path / "a.tar"
    _tar(path, count=3, parts=(".jpg", ".txt", ".mp4"))
    monkeypatch.setattr(tar_members, "MAX_MEMBER_BYTES", 999)
    got = list_tar(str(path))
    # The .mp4 is no part of a sample: never read, never refused; .jpg and .txt are over.
    assert all(isinstance(v, RowDropped) and v.reason is SkipReason.TAR_MEMBER_TOO_LARGE for _, v in got)
    assert "holds 1000 bytes, over the 999-byte limit" in got[0][1].detail  # type: ignore[union-attr]
    monkeypatch.setattr(tar_members, "MAX_MEMBER_BYTES", 1000)  # at the limit: allowed
    assert all(isinstance(v, TarSample) for _, v in list_tar(str(path)))


def test_a_large_member_no_sample_uses_refuses_nothing(tmp_path, monkeypatch):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w") as archive:
        for name, size in (("0.jpg", 100), ("0.mp4", 5000), ("0.txt", 100)):
            info = tarfile.TarInfo(name)
            info.size = size
            archive.addfile(info, io.BytesIO(bytes(size)))
    monkeypatch.setattr(tar_members, "MAX_MEMBER_BYTES", 1000)
    assert _outcomes(path) == {"0": "ok"}


@pytest.mark.parametrize(
    "cut, says",
    [(100, "mid-header"), (512 + 512, "member '0003.jpg' runs to byte"), (0, "no end-of-archive block")],
    ids=["mid-header", "mid-member", "at-a-header"],
)
def test_a_cut_tar_is_still_unreadable_as_a_whole(tmp_path, cut, says):
    path = tmp_path / "a.tar"
    headers = dict(_tar(path, count=4))
    data = path.read_bytes()
    path.write_bytes(data[: headers["0003.jpg"] + cut])
    with pytest.raises(tarfile.ReadError, match=f"unexpected end of data: .*{says}"):
        list_tar(str(path))


def test_a_few_stray_bytes_in_the_end_of_archive_block_are_damage(tmp_path):
    path = tmp_path / "a.tar"
    headers = _tar(path, count=2)
    end = headers[-1][1] + 512 + 1024  # the last member's header and data
    _overwrite(path, end + 3, b"\x01")
    assert _outcomes(path) == {"0000": "ok", "0001": "ok", f"<damaged bytes {end}-{end + 512}>": "tar_damaged"}


def test_one_stray_block_between_members_is_one_counted_stretch(tmp_path):
    """512 bytes of garbage inserted between two members (a stray block, no header lost):
    every key reads, and the one block is counted, not passed over."""
    path = tmp_path / "a.tar"
    headers = dict(_tar(path, count=4))
    data = path.read_bytes()
    at = headers["0002.jpg"]
    path.write_bytes(data[:at] + bytes(range(256)) * 2 + data[at:])
    got = _outcomes(path)
    assert [key for key, outcome in got.items() if outcome == "ok"] == ["0000", "0001", "0002", "0003"]
    assert [key for key in got if key.startswith("<damaged")] == [f"<damaged bytes {at}-{at + 512}>"]


def _small_tar(members) -> bytes:
    """A tar of `(name, bytes or None for a symlink to the member before)` members."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        previous = None
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.linkname = tarfile.SYMTYPE, previous
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            previous = name
    return buffer.getvalue()


def test_walk_gives_each_file_members_data_and_no_link_member():
    data = _small_tar([("k/a.jpg", b"jpeg"), ("k/a.txt", None), ("k/b.txt", b"words")])
    entries = list(tar_walk.walk(io.BytesIO(data), len(data)))
    assert [(name, data[at : at + size]) for name, at, size in entries] == [("k/a.jpg", b"jpeg"), ("k/b.txt", b"words")]


@pytest.mark.parametrize(
    "error", [UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), ValueError("bad"), OverflowError()]
)
def test_a_header_the_parser_fails_on_in_any_way_is_damage(monkeypatch, error):
    data = _small_tar([("k/a.txt", b"a"), ("k/b.txt", b"b"), ("k/c.txt", b"c")])
    parse = tarfile.TarInfo.fromtarfile.__func__

    def failing(cls, reader):
        if reader.fileobj.tell() == 1024:  # the second header
            raise error
        return parse(cls, reader)

    monkeypatch.setattr(tarfile.TarInfo, "fromtarfile", classmethod(failing))
    entries = list(tar_walk.walk(io.BytesIO(data), len(data)))
    assert [entry if isinstance(entry, tar_walk.Damaged) else entry[0] for entry in entries] == [
        "k/a.txt",
        tar_walk.Damaged(1024, 2048),
        "k/c.txt",
    ]


def test_no_read_to_the_end_of_the_tar_while_walking():
    capped = tar_walk._Capped(io.BytesIO(b"x" * 100))
    for size in (-1, tar_walk.EXTENDED_LIMIT + 1):
        with pytest.raises(tarfile.HeaderError):
            capped.read(size)
    assert capped.read(10) == b"x" * 10
