"""The member rules of WebDataset tars (`sources/tar_members.py`): one table of cases, run
through `prepare t2i` and through the in-place reader (`families/t2i_tars.py`), which must
agree on every key: the same captions, or the same reason to leave it out."""

from __future__ import annotations

import io
import json
import tarfile

import pyarrow.parquet as pq
import pytest

from bagel_data.errors import SkipLog, SkipReason
from bagel_data.families.reads import FamilyReads
from bagel_data.families.t2i_tars import tar_rows
from bagel_data.sources.tar_members import group_members, member_role
from bagel_data.tools.prepare.report import REPORT_NAMES
from bagel_data.tools.prepare.sharded import prepare_sharded
from helpers.prepare_inputs import image_bytes

JPG = image_bytes(1)
PNG = image_bytes(2, "PNG")
META = {"url": "http://x", "caption": "from json", "width": 40, "status": "success"}

# (members of key `k/a` in tar order, what comes of the key: its captions or a reason)
CASES = {
    "image and txt": ([("k/a.jpg", JPG), ("k/a.txt", b"one\n\ntwo\n")], ["one", "two"]),
    "image and json caption": ([("k/a.jpg", JPG), ("k/a.json", json.dumps(META).encode())], ["from json"]),
    "txt and json, repeated text once": (
        [("k/a.txt", b"from json\nx"), ("k/a.jpg", JPG), ("k/a.json", json.dumps(META).encode())],
        ["from json", "x"],
    ),
    "json list": ([("k/a.png", PNG), ("k/a.json", b'["l1", "l2"]')], ["l1", "l2"]),
    "upper-case extension": ([("k/a.JPEG", JPG), ("k/a.txt", b"upper")], ["upper"]),
    "json without a caption key": ([("k/a.jpg", JPG), ("k/a.json", b'{"url": "u"}')], SkipReason.NO_CAPTION),
    "image alone": ([("k/a.jpg", JPG)], SkipReason.NO_CAPTION),
    "blank txt": ([("k/a.jpg", JPG), ("k/a.txt", b"  \n")], SkipReason.NO_CAPTION),
    "caption without image": ([("k/a.txt", b"orphan")], SkipReason.CAPTION_WITHOUT_IMAGE),
    "neither image nor caption": ([("k/a.cls", b"3")], SkipReason.IMAGE_MISSING),
    "two images": ([("k/a.jpg", JPG), ("k/a.png", PNG), ("k/a.txt", b"t")], SkipReason.MEMBER_TWICE),
    "txt given twice": ([("k/a.jpg", JPG), ("k/a.txt", b"t"), ("k/a.txt", b"u")], SkipReason.MEMBER_TWICE),
    "txt not utf-8": ([("k/a.jpg", JPG), ("k/a.txt", b"\xff\xfe")], SkipReason.CAPTION_INVALID),
    "json not json": ([("k/a.jpg", JPG), ("k/a.json", b"{nope")], SkipReason.CAPTION_INVALID),
    "json caption not text": ([("k/a.jpg", JPG), ("k/a.json", b'{"caption": 3}')], SkipReason.CAPTION_INVALID),
    "image not an image": ([("k/a.jpg", b"broken"), ("k/a.txt", b"t")], SkipReason.IMAGE_DECODE),
    # A classification key: `.cls` and `.npy` beside the image are no part of the sample
    # (never "the same part twice"), and without an image the key is image_file_missing.
    "cls and npy beside the image": (
        [("k/a.jpg", JPG), ("k/a.cls", b"3"), ("k/a.npy", b"\x93NUMPY"), ("k/a.txt", b"labelled")],
        ["labelled"],
    ),
    "cls and npy alone": ([("k/a.cls", b"3"), ("k/a.npy", b"\x93NUMPY")], SkipReason.IMAGE_MISSING),
    # Numbered caption keys by number (caption_2 before caption_10), blank ones left out.
    "numbered json captions": (
        [
            ("k/a.jpg", JPG),
            ("k/a.json", b'{"caption": "c", "caption_10": "ten", "caption_2": "two", "caption_3": " "}'),
        ],
        ["c", "two", "ten"],
    ),
    "blank json caption falls through": (
        [("k/a.jpg", JPG), ("k/a.json", b'{"caption": "  ", "text": "from text"}')],
        ["from text"],
    ),
    "blank lines of txt": ([("k/a.jpg", JPG), ("k/a.txt", b"\n  one  \n\t\n")], ["one"]),
}
# Every tar also holds one good key, a folder and a file without an extension (no samples).
GOOD = [("k/z.jpg", JPG), ("k/z.txt", b"good")]


def _tar(path, members) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as archive:
        folder = tarfile.TarInfo("k")
        folder.type = tarfile.DIRTYPE
        archive.addfile(folder)
        for name, data in [*members, *GOOD, ("README", b"not a sample")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return str(path)


def _prepared(tmp_path, tar: str) -> dict:
    """key -> captions written, or the SkipReason prepare's report names."""
    report = prepare_sharded("t2i", tmp_path / "shards", tmp_path / "out")
    reasons = {name: reason for reason, name in REPORT_NAMES.items()}
    reasons.update({reason.value: reason for reason in SkipReason if reason not in REPORT_NAMES})
    out = {note.location.split(":", 1)[1]: reasons[note.reason] for note in report.dropped}
    rows = [row for path in report.files_written for row in pq.read_table(path).to_pylist()]
    kept = [key for key in ("k/a", "k/z") if key not in out]
    out.update({key: list(json.loads(row["captions"]).values()) for key, row in zip(kept, rows)})
    return out


def _in_place(tar: str) -> dict:
    """key -> captions of its cells, or the SkipReason the reader counts (an image that does
    not decode is the family's decode skip, checked here by decoding the cell)."""
    from bagel_data.media.images import ImageDecodeError, decode_image

    log, skipped = SkipLog("t2i"), []
    log.skip = lambda reason, location, detail="", rows=1: skipped.append((reason, location))  # type: ignore[method-assign]
    out = {}
    for _, _, cells, location in tar_rows(FamilyReads(), tar, 0, 0, log):
        try:
            decode_image(cells["image"])
            out[location.split(":", 1)[1]] = list(json.loads(cells["captions"]).values())
        except ImageDecodeError:
            out[location.split(":", 1)[1]] = SkipReason.IMAGE_DECODE
    out.update({location.split(":", 1)[1]: reason for reason, location in skipped})
    return out


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_prepare_and_the_in_place_reader_apply_the_same_member_rules(tmp_path, case):
    members, expected = CASES[case]
    tar = _tar(tmp_path / "shards" / "00000.tar", members)
    want = {"k/a": expected, "k/z": ["good"]}
    assert _prepared(tmp_path, tar) == want
    assert _in_place(tar) == want


def test_member_roles_and_keys_follow_the_first_dot_of_the_file_name():
    assert [member_role(ext) for ext in ("jpg", "webp", "txt", "json", "cls", "jpg.txt")] == [
        "image", "image", "txt", "json", "cls", "other",
    ]  # fmt: skip
    entries = [("set.v1/0001.jpg", 0, 3), ("set.v1/0001.seg.png", 10, 3), ("0002.tar.gz", 20, 1), ("noext", 30, 1)]
    keyed = dict(group_members("t.tar", entries))
    assert list(keyed) == ["set.v1/0001", "0002"]
    sample = keyed["set.v1/0001"]
    assert sample.image is not None and (sample.image.name, sample.image.offset) == ("set.v1/0001.jpg", 0)
    assert keyed["0002"].reason is SkipReason.IMAGE_MISSING  # type: ignore[union-attr]


def test_numbered_caption_keys_sort_by_number_not_text():
    from bagel_data.sources.captions import numbered_caption_keys

    row = {"caption_10": 1, "caption_2": 1, "caption_1": 1, "caption_": 1, "captions": 1, "caption_3x": 1, 7: 1}
    assert numbered_caption_keys(row) == [(1, "caption_1"), (2, "caption_2"), (10, "caption_10")]


def _grouped(*members: tuple[str, int]) -> dict:
    """`group_members` of file members `(name, size)` laid one after another."""
    entries, at = [], 512
    for name, size in members:
        entries.append((name, at, size))
        at += 512 + -(-size // 512) * 512
    return dict(group_members("t.tar", entries))


def test_members_no_sample_reads_neither_repeat_a_part_nor_weigh_on_it():
    from bagel_data.sources.tar_members import MAX_MEMBER_BYTES, TarSample

    # Two members of no part (.mp4, .npy), the first over the media cap: the key reads
    # its image and caption only, and is a sample.
    got = _grouped(("k/a.jpg", 10), ("k/a.mp4", MAX_MEMBER_BYTES + 1), ("k/a.npy", 10), ("k/a.txt", 3))
    assert isinstance(got["k/a"], TarSample) and got["k/a"].txt is not None
    too_large = _grouped(("k/a.jpg", MAX_MEMBER_BYTES + 1), ("k/a.txt", 3))["k/a"]
    assert too_large.reason == SkipReason.TAR_MEMBER_TOO_LARGE


def test_a_key_with_only_a_json_is_a_caption_without_image():
    assert _grouped(("k/a.json", 10))["k/a"].reason == SkipReason.CAPTION_WITHOUT_IMAGE


def test_class_labels_index_the_names_from_zero_and_blank_lines_are_no_class(tmp_path):
    from bagel_data.errors import RowDropped
    from bagel_data.sources.tar_members import class_caption, load_class_names

    names_file = tmp_path / "classes.txt"
    names_file.write_text("cat\n\ndog\n\n")
    names = load_class_names(str(names_file), "groups.g.class_names")
    assert names == ["cat", "dog"]
    assert class_caption(b"1\n", names) == ["dog"]
    for label in (b"-1", b"2"):
        with pytest.raises(RowDropped, match="not in class_names"):
            class_caption(label, names)


def test_a_folder_of_only_compressed_tars_is_refused_by_name(tmp_path):
    from bagel_data.errors import ConfigError
    from bagel_data.sources.tar_members import tar_files

    (tmp_path / "shard-0.tar.gz").write_bytes(b"\x1f\x8b")
    with pytest.raises(ConfigError, match="shard-0.tar.gz"):
        tar_files(tmp_path)
    (tmp_path / "table.parquet").write_bytes(b"PAR1")  # beside tables, an archive is no shard of theirs
    assert tar_files(tmp_path) == []
