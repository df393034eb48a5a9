"""Tars read in place and by `prepare t2i`, as an adversary gives them: damaged headers lose
only what they cover (counted `tar_damaged`); compressed shards are refused by name; a block
reads only the members its samples use, each under the media cap; a position past a tar's
blocks or samples, or the `prepare t2i` copy's `data_status`, is a `ResumeError`."""

from __future__ import annotations

import gzip
import io
import itertools
import tarfile

import pytest

from bagel_data.errors import ConfigError, ResumeError, SkipReason
from bagel_data.families.positions import cursor_problem
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.families.unit_plan import UnitPlan
from bagel_data.media.images import ImageTransform
from bagel_data.sources import storage, tar_index, tar_members
from bagel_data.tools.prepare.sharded import prepare_sharded
from helpers.prepare_inputs import image_bytes

TRANSFORM = ImageTransform(32, 16, 16)


def _tar(path, count: int = 20, extra: dict[int, bytes] | None = None) -> dict[str, int]:
    """`count` keys `NNNN` with `.jpg` and `.txt` (`caption N`), and for keys in `extra` an
    `.mp4` of those bytes between them; returns each member's header offset."""
    path.parent.mkdir(parents=True, exist_ok=True)
    headers = {}
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        for index in range(count):
            parts = [(".jpg", image_bytes(index, size=(40, 24)))]
            if extra and index in extra:
                parts.append((".mp4", extra[index]))
            parts.append((".txt", f"caption {index}".encode()))
            for ext, data in parts:
                info = tarfile.TarInfo(f"{index:04d}{ext}")
                info.size = len(data)
                headers[info.name] = archive.offset
                archive.addfile(info, io.BytesIO(data))
    return headers


def _dataset(folder, tokenizer, count: int = 1, **kwargs) -> T2IIterableDataset:
    return T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(folder)], [count], num_workers=1, **kwargs)


def _first_pass(dataset) -> list[tuple[tuple, dict]]:
    samples = []
    for cursor, sample in dataset.iter_samples():
        if cursor[0] > 0:
            return samples
        samples.append((cursor, sample))
    raise AssertionError("unreachable")


def _captions(dataset, tokenizer) -> list[str]:
    return [tokenizer.decode(sample["text_ids_list"][0]) for _, sample in _first_pass(dataset)]


def _overwrite(path, at: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(at)
        handle.write(data)


@pytest.mark.parametrize("damage", ["garbage over a header", "a zeroed 4 KiB block"])
def test_a_damaged_tar_loses_only_what_the_damage_covers_and_counts_it(tmp_path, tokenizer, damage):
    path = tmp_path / "tars" / "a.tar"
    headers = _tar(path)
    if damage == "garbage over a header":
        _overwrite(path, headers["0009.jpg"], bytes(range(256)) * 2)
    else:
        _overwrite(path, headers["0009.jpg"] // 4096 * 4096, bytes(4096))
    dataset = _dataset(path.parent, tokenizer)
    captions = _captions(dataset, tokenizer)
    counts = dict(dataset.skip_log.counts)
    # Everything after the damage is read: the tail is no longer lost.
    assert "caption 19" in captions and len(captions) >= 17, captions
    assert counts[SkipReason.TAR_DAMAGED.value] >= 1
    assert "<damaged bytes" in dataset.skip_log.examples[SkipReason.TAR_DAMAGED.value]
    # Each of the 20 keys is read or counted, or had all its members inside the damage.
    lost = [i for i in range(20) if f"caption {i}" not in captions]
    assert len(lost) <= sum(counts.values())
    # prepare t2i drops the same rows by name, and writes the rest.
    report = prepare_sharded("t2i", path.parent, tmp_path / "out")
    dropped = [note.reason for note in report.dropped]
    assert SkipReason.TAR_DAMAGED in dropped or SkipReason.TAR_DAMAGED.value in dropped
    assert report.rows_written == len(captions)


def test_compressed_shards_are_refused_by_name_with_the_fix(tmp_path, tokenizer):
    folder = tmp_path / "tars"
    _tar(folder / "00000.tar", 3)
    _tar(tmp_path / "plain.tar", 3)
    (folder / "00001.tar.gz").write_bytes(gzip.compress((tmp_path / "plain.tar").read_bytes()))
    (folder / "00002.tgz").write_bytes(gzip.compress((tmp_path / "plain.tar").read_bytes()))
    for build in (lambda: _dataset(folder, tokenizer), lambda: prepare_sharded("t2i", folder, tmp_path / "out")):
        with pytest.raises(ConfigError, match=r"compressed tar shards \(00001\.tar\.gz, 00002\.tgz\).*gunzip -k"):
            build()
    only = tmp_path / "only"
    only.mkdir()
    (only / "00001.tar.gz").write_bytes(gzip.compress((tmp_path / "plain.tar").read_bytes()))
    with pytest.raises(ConfigError, match=r"compressed tar shards \(00001\.tar\.gz\)"):
        _dataset(only, tokenizer)
    for source in (only, only / "00001.tar.gz"):
        with pytest.raises(ConfigError, match=r"compressed tar shards \(00001\.tar\.gz\)"):
            prepare_sharded("t2i", source, tmp_path / "out")
    # Beside parquet tables, an archive is no shard: the tables are read as before.
    tables = tmp_path / "tables"
    prepare_sharded("t2i", folder / "00000.tar", tables)
    (tables / "backup.tar.gz").write_bytes(b"not read")
    assert len(_captions(_dataset(tables, tokenizer), tokenizer)) == 3
    assert prepare_sharded("t2i", tables, tmp_path / "again").rows_written == 3


def test_an_upper_case_tar_is_read_beside_the_others(tmp_path, tokenizer):
    _tar(tmp_path / "tars" / "00000.tar", 3)
    _tar(tmp_path / "tars" / "00001.TAR", 2)
    dataset = _dataset(tmp_path / "tars", tokenizer, 2)
    assert sorted(_captions(dataset, tokenizer)) == sorted([f"caption {i}" for i in (0, 1, 2, 0, 1)])
    assert prepare_sharded("t2i", tmp_path / "tars", tmp_path / "out").rows_written == 5


def test_a_block_reads_only_the_members_its_samples_use(tmp_path, tokenizer, monkeypatch):
    path = tmp_path / "tars" / "a.tar"
    video = bytes(3 << 20)  # a 3 MB .mp4 between key 1's .jpg and .txt, used by no sample
    _tar(path, 4, extra={1: video})
    read = []
    real = storage.open_input

    class Counting:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def seek(self, *args):
            return self.handle.seek(*args)

        def read(self, size=-1):
            data = self.handle.read(size)
            read.append(len(data))
            return data

    index = tar_index.TarIndex(str(path))
    monkeypatch.setattr(storage, "open_input", lambda path: Counting(real(path)))
    data = [index.read_block(block) for block in range(len(index.blocks))]
    assert sum(read) < 100_000, read  # the four samples' members and their headers, not the 3 MB
    assert len(index.blocks) == 1 and len(index.blocks[0].reads) == 2  # before and after the video
    monkeypatch.undo()
    assert _captions(_dataset(path.parent, tokenizer), tokenizer) == [f"caption {i}" for i in range(4)]
    assert index.parts(1, 0, data[0])[1] == b"caption 1"


def test_a_member_over_the_media_cap_is_a_counted_skip(tmp_path, tokenizer, monkeypatch):
    path = tmp_path / "tars" / "a.tar"
    _tar(path, 4)
    sizes = {key: value.image.size for key, value in tar_members.list_tar(str(path))}  # type: ignore[union-attr]
    cap = sorted(set(sizes.values()))[-2]  # the largest image(s) over it, the others at or under
    monkeypatch.setattr(tar_members, "MAX_MEMBER_BYTES", cap)
    smaller = [key for key, size in sizes.items() if size <= cap]
    dataset = _dataset(path.parent, tokenizer)
    captions = _captions(dataset, tokenizer)
    over = len(sizes) - len(smaller)
    assert len(captions) == len(smaller) and set(dataset.skip_log.counts) == {SkipReason.TAR_MEMBER_TOO_LARGE.value}
    assert dataset.skip_log.counts[SkipReason.TAR_MEMBER_TOO_LARGE.value] >= over  # (the next pass's count too)
    report = prepare_sharded("t2i", path.parent, tmp_path / "out")
    assert report.rows_written == len(smaller)


def test_a_position_past_a_tar_s_blocks_or_samples_is_refused(tmp_path, tokenizer, monkeypatch):
    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)  # positions of whole tars: [unit, block, sample, tag]
    path = tmp_path / "tars" / "a.tar"
    _tar(path, 6)
    dataset = _dataset(path.parent, tokenizer)
    full = _first_pass(dataset)
    last = full[-1][1]["data_indexes"]["data_indexes"]  # [unit, block, sample, tag]
    assert last[:3] == [0, 0, 5]
    for position, says in (
        ([0, 1, 0, last[3]], "block 1 does not exist: .*a.tar has 1 block"),
        ([0, 0, 6, last[3]], "sample 6 does not exist: .*a.tar, block 0 has 6 sample"),
    ):
        with pytest.raises(ResumeError, match=says):
            next(iter(_dataset(path.parent, tokenizer, data_status=[position])))
    resumed = _dataset(path.parent, tokenizer, data_status=[[0, 0, 3, last[3]]])
    got = [tokenizer.decode(sample["text_ids_list"][0]) for sample in itertools.islice(iter(resumed), 2)]
    assert got == ["caption 4", "caption 5"]
    # A checkpoint's cursor (phase, unit, block, sample) is checked by the same rule.
    assert "block 1 does not exist" in str(cursor_problem(dataset, (0, 0, 1, 0)))
    assert "sample 6 does not exist" in str(cursor_problem(dataset, (0, 0, 0, 6)))
    assert cursor_problem(dataset, (0, 0, 0, 5)) is None


@pytest.mark.parametrize("by_rows", [False, True])
def test_the_data_status_of_the_prepared_copy_is_refused_for_the_tars(tmp_path, tokenizer, monkeypatch, by_rows):
    """By units the copy's positions are untagged; by rows both are `[round, draw, tag]` over
    as many rows, and the tars' tag is salted apart (`positions.row_fingerprint`)."""
    monkeypatch.setattr(UnitPlan, "walk_by_rows", by_rows)
    path = tmp_path / "tars" / "a.tar"
    _tar(path, 6)
    prepare_sharded("t2i", path.parent, tmp_path / "prepared")
    copy = _dataset(tmp_path / "prepared", tokenizer)
    position = _first_pass(copy)[2][1]["data_indexes"]["data_indexes"]
    if by_rows:
        with pytest.raises(ResumeError, match="not a position of this worker's walk by rows"):
            next(iter(_dataset(path.parent, tokenizer, data_status=[position])))
        return
    with pytest.raises(ResumeError, match="untagged: a position of parquet rows"):
        next(iter(_dataset(path.parent, tokenizer, data_status=[position])))
    tagged = [*position, 12345]  # a tag, but not of these tars' list
    with pytest.raises(ResumeError, match="another file list"):
        next(iter(_dataset(path.parent, tokenizer, data_status=[tagged])))


def test_validate_names_the_compressed_shards_instead_of_saying_ok(tmp_path, tokenizer):
    from bagel_data.tools.run import RunConfig
    from bagel_data.tools.validate import validate_config
    from helpers.builders import SMALL_VAE

    folder = tmp_path / "tars"
    _tar(folder / "00000.tar", 3)
    (folder / "00001.tgz").write_bytes(gzip.compress((folder / "00000.tar").read_bytes()))
    group = {"dataset_names": ["wds"], "image_transform_args": SMALL_VAE, "num_used_data": [1], "weight": 1}
    info = {"t2i_pretrain": {"wds": {"data_dir": str(folder)}}}
    budgets = {"expected_num_tokens": 4096, "max_num_tokens": 8192, "max_num_tokens_per_sample": 4096}
    report = validate_config(RunConfig({"t2i_pretrain": group}, info, budgets), num_workers=1, tokenizer=tokenizer)
    assert not report.ok and "compressed tar shards (00001.tgz)" in " ".join(report.errors)
