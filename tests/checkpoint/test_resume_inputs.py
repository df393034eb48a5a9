"""Resume refuses what it cannot do exactly: a checkpoint names the files it was taken on,
and an added, removed or changed file is a ResumeError naming it. Missing media of a
buffered sample is a counted skip, not a refused checkpoint."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from bagel_data import ImageTransform, SftJSONLIterableDataset, T2IIterableDataset, UnifiedEditIterableDataset
from bagel_data.checkpoint.inputs import MAX_LISTED, check_inputs, input_record
from bagel_data.checkpoint.state import BufferEntry
from bagel_data.errors import ResumeError
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.packed_dataset import PackedDataset
from helpers.builders import png_bytes, solid_jpeg, write_edit, write_t2i, write_vlm

ROW = {"image": solid_jpeg(64, 48), "captions": {"c": "a red square"}}


def packed(special_tokens, groups: dict, **budget) -> PackedDataset:
    sizes = dict(expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70)
    config = PackingConfig(**dict(sizes, **budget))
    names = list(groups)
    return PackedDataset.from_groups(
        groups,
        config,
        special_tokens,
        weights=dict.fromkeys(names, 1.0),
        mandatory=dict.fromkeys(names, False),
        local_rank=0,
        world_size=1,
        num_workers=1,
        data_seed=0,
    )


def t2i_packed(folder, tokenizer, special_tokens, files: int) -> PackedDataset:
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(folder)], [files], num_workers=1)
    return packed(special_tokens, {"t2i": family})


def checkpoint_after(dataset, batches: int) -> dict:
    stream = iter(dataset)
    list(itertools.islice(stream, batches))
    return dataset.state_dict()


@pytest.mark.parametrize("change", ["removed", "added", "changed"])
def test_a_changed_input_file_is_a_resume_error_naming_it(tmp_path, tokenizer, special_tokens, change):
    paths = write_t2i(tmp_path, [[[ROW] * 3], [[ROW] * 2], [[ROW] * 2]], names=["b.parquet", "c.parquet", "d.parquet"])
    state = checkpoint_after(t2i_packed(tmp_path, tokenizer, special_tokens, 3), 2)
    if change == "removed":
        os.remove(paths[1])  # 2 files repeat to 3 units: the unit count alone would not show it
        named = "c.parquet was removed"
    elif change == "added":
        write_t2i(tmp_path, [[[ROW]]], names=["a.parquet"])
        named = "a.parquet was added"
    else:
        write_t2i(tmp_path, [[[ROW] * 5]], names=["c.parquet"])
        named = "c.parquet changed"
    resumed = t2i_packed(tmp_path, tokenizer, special_tokens, 3)
    resumed.load_state_dict(state)
    with pytest.raises(ResumeError, match=rf"t2i: the inputs changed since the checkpoint: .*{named}"):
        next(iter(resumed))


def test_same_inputs_resume_and_the_record_is_small(tmp_path, tokenizer, special_tokens):
    write_t2i(tmp_path, [[[ROW] * 3], [[ROW] * 2]])
    state = checkpoint_after(t2i_packed(tmp_path, tokenizer, special_tokens, 2), 2)
    assert state["inputs"]["t2i"]["count"] == 2 and len(repr(state["inputs"])) < 1000
    resumed = t2i_packed(tmp_path, tokenizer, special_tokens, 2)
    resumed.load_state_dict(state)
    next(iter(resumed))


def test_an_edit_checkpoint_records_each_parquet_file_once(tmp_path, tokenizer, special_tokens):
    """Edit units are (file, row group) pairs: the record lists the files, not the pairs."""
    row = {"image_list": [png_bytes(32, 32)] * 2, "instruction_list": [["make it red"]]}
    paths, info = write_edit(tmp_path, [[[row], [row]], [[row]]])
    family = UnifiedEditIterableDataset(
        "edit", ImageTransform(32, 16, 16), tokenizer, ImageTransform(28, 14, 14), [str(tmp_path)], [2], info,
        num_workers=1,
    )  # fmt: skip
    state = checkpoint_after(packed(special_tokens, {"edit": family}), 1)
    assert [entry[0] for entry in state["inputs"]["edit"]["files"]] == sorted(paths)


def test_many_files_keep_only_a_digest():
    files = [f"/nonexistent/{i}.parquet" for i in range(MAX_LISTED + 1)]
    record = input_record(files)
    assert "files" not in record and record["count"] == MAX_LISTED + 1
    assert len(input_record(files[:-1])["files"]) == MAX_LISTED  # up to the limit, listed
    with pytest.raises(ResumeError, match=r"257 files then, 256 now"):
        check_inputs("g", record, input_record(files[:-1]))


def test_missing_media_of_a_buffered_sample_is_a_counted_skip(tmp_path, tokenizer, special_tokens):
    answer = [{"from": "human", "value": "<image> describe"}, {"from": "gpt", "value": "a grey square " * 3}]
    images = {f"{i}.png": png_bytes(28, 28, (i * 20, 0, 0)) for i in range(12)}
    rows = [{"image": f"{i}.png", "conversations": answer} for i in range(12)]
    jsonl, image_dir = write_vlm(tmp_path, rows, images)

    def build():
        family = SftJSONLIterableDataset(
            "vlm", ImageTransform(56, 28, 14), tokenizer, None, [jsonl], [image_dir], [12], num_workers=1
        )
        return packed(special_tokens, {"vlm": family}, expected_num_tokens=70, max_num_tokens=75, max_buffer_size=4)

    dataset = build()
    stream = iter(dataset)
    for _ in range(20):
        next(stream)
        if dataset._live.overflow.buffer or dataset._live.overflow.carry:
            break
    state = dataset.state_dict()
    held = state["stages"]["overflow"]["buffer"] + (
        [state["stages"]["overflow"]["carry"]] if state["stages"]["overflow"]["carry"] else []
    )
    waiting = [list(BufferEntry.read(raw).cursor) for raw in held]
    assert waiting, "the budget should leave a sample waiting"
    for cursor in waiting:  # remove the media of every waiting sample
        sample = dataset.grouped_datasets[0].sample_at(tuple(cursor))
        index = sample["row_key"][0]  # the unit: one line
        line = dataset.grouped_datasets[0].data_paths[dataset.grouped_datasets[0].epoch_units[index]][0]
        name = line.split('"image": "')[1].split('"')[0]
        os.remove(os.path.join(image_dir, name))
    before = sum(state["skips"]["vlm"].values())
    resumed = build()
    resumed.load_state_dict(state)
    next(iter(resumed))
    skips = resumed.stats["skips"]["vlm"]
    assert skips.get("image_file_missing", 0) >= 1 and sum(skips.values()) > before


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_a_same_size_jsonl_edit_in_place_is_refused(tmp_path, tokenizer, special_tokens, keep_mtime):
    answer = [{"from": "human", "value": "<image> describe"}, {"from": "gpt", "value": "a grey square"}]
    images = {f"{i}.png": png_bytes(28, 28, (i * 20, 0, 0)) for i in range(8)}
    rows = [{"image": f"{i}.png", "conversations": answer} for i in range(8)]
    jsonl, image_dir = write_vlm(tmp_path, rows, images)

    def build():
        family = SftJSONLIterableDataset(
            "vlm", ImageTransform(56, 28, 14), tokenizer, None, [jsonl], [image_dir], [8], num_workers=1
        )
        return packed(special_tokens, {"vlm": family}, expected_num_tokens=70, max_num_tokens=75)

    state = checkpoint_after(build(), 2)
    before = os.stat(jsonl)
    text = Path(jsonl).read_text(encoding="utf-8")
    edited = text.replace('"7.png"', '"0.png"')  # the same byte count
    assert len(edited) == len(text) and edited != text
    with open(jsonl, "r+", encoding="utf-8") as handle:
        handle.write(edited)
    if keep_mtime:  # a copy tool that keeps times: the head/tail hash still shows the edit
        os.utime(jsonl, ns=(before.st_atime_ns, before.st_mtime_ns))
    resumed = build()
    resumed.load_state_dict(state)
    with pytest.raises(ResumeError, match=r"vlm: the inputs changed .*same size"):
        next(iter(resumed))


@pytest.mark.parametrize("text", ["x" * 5000, "see s3://bucket/key and http://host/a"])
def test_interleaved_jsonl_records_its_files_not_document_text(tmp_path, tokenizer, special_tokens, text):
    from bagel_data import make_bagel_multimodal_dataset
    from helpers.interleaved import write_interleaved_jsonl

    docs = [[{"type": "text", "text": f"{text} {i}", "supervised": True}] for i in range(6)]
    path = write_interleaved_jsonl(tmp_path / "docs.jsonl", docs)
    dataset = make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets={"interleaved": {"dataset_names": ["docs"], "num_used_data": [6], "weight": 1,
                                 "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32},
                                 "segment_defaults": {"first_image": ["conditioned"], "later_images": ["generated"]}}},
        dataset_info={"interleaved": {"docs": {"jsonl_path": path, "data_dir": str(tmp_path)}}},
        num_workers=1,
        expected_num_tokens=2000,
        max_num_tokens=3000,
        max_num_tokens_per_sample=2500,
        prefer_buffer_before=400,
    )  # fmt: skip
    next(iter(dataset))
    assert [entry[0] for entry in dataset.state_dict()["inputs"]["interleaved"]["files"]] == [path]


def test_a_same_size_change_says_what_differs(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"a": 1}\n')
    saved = input_record([str(path)])
    os.utime(path, ns=(1, 1))  # touched: the same bytes, another modification time
    with pytest.raises(ResumeError, match=r"same size, modified since\)"):
        check_inputs("vlm", saved, input_record([str(path)]))
    path.write_text('{"b": 2}\n')  # the same size, other bytes
    with pytest.raises(ResumeError, match=r"same size, different content\)"):
        check_inputs("vlm", saved, input_record([str(path)]))


def test_a_mid_file_edit_of_a_large_jsonl_shows_even_with_its_mtime_put_back(tmp_path):
    """Past 128 KiB the head and tail are not the file: an edit in its middle must show."""
    path = tmp_path / "train.jsonl"
    lines = [b'{"row": %06d, "pad": "%s"}\n' % (i, b"x" * 200) for i in range(3000)]  # ~660 KB
    path.write_bytes(b"".join(lines))
    saved = input_record([str(path)])
    before = os.stat(path)
    lines[1500] = lines[1500].replace(b"001500", b"999999")
    path.write_bytes(b"".join(lines))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(ResumeError, match=r"train.jsonl changed \(same size, different content\)"):
        check_inputs("vlm", saved, input_record([str(path)]))


def test_a_checkpoint_with_the_older_head_and_tail_stamp_still_resumes(tmp_path):
    from bagel_data.checkpoint import inputs

    path = tmp_path / "train.jsonl"
    path.write_bytes(b"".join(b'{"row": %06d}\n' % i for i in range(20000)))  # ~280 KB
    current = input_record([str(path)])
    size, stamp = current["files"][0][1:]
    old_stamp = stamp.partition(":")[0] + ":" + inputs._legacy_hash(str(path), size)
    saved = {**current, "digest": "from an older release", "files": [[str(path), size, old_stamp]]}
    check_inputs("vlm", saved, current)  # unchanged: no error
    data = path.read_bytes()
    path.write_bytes(data[:-8] + b"99999}\n\n"[:8])  # the tail edited: the old stamp sees it
    with pytest.raises(ResumeError, match="same size"):
        check_inputs("vlm", saved, input_record([str(path)]))


def _memory_file(name: str, data: bytes) -> str:
    """A remote input (fsspec's in-memory filesystem stands for an object store)."""
    import fsspec

    path = f"memory://inputs-test/{name}"
    with fsspec.filesystem("memory").open(path, "wb") as handle:
        handle.write(data)
    return path


def test_a_remote_input_is_recorded_from_its_listing_without_a_read(monkeypatch):
    """1,000 remote tars cost no request to record: size and time come from the listing."""
    from bagel_data.checkpoint import inputs

    path = _memory_file("a.tar", b"x" * 1000)

    read = []

    def reading(path, *args):
        read.append(path)
        raise OSError("counted, not read")

    monkeypatch.setattr(inputs, "content_digest", reading)
    record = input_record([path], {path: (1000, 1234)})
    assert record["files"] == [[path, 1000, "1234"]] and read == []
    local = input_record(["/data/local.tar"], {"/data/local.tar": (1000, 1234)})
    assert local["files"][0][2] == "1234:unreadable" and read == ["/data/local.tar"]  # a local tar is digested


def test_a_checkpoint_that_digested_a_remote_input_still_resumes_and_sees_a_same_size_rewrite():
    """Checkpoints written before remote inputs went undigested carry a content digest: on
    resume it is read then (and only for a file whose size and time match) and compared."""
    from bagel_data.checkpoint import inputs

    path = _memory_file("b.tar", b"a" * 5000)
    saved_stamp = "77:" + inputs._content_hash(path, 5000)
    saved = {"count": 1, "digest": "written by an older release", "files": [[path, 5000, saved_stamp]]}
    check_inputs("t2i", saved, input_record([path], {path: (5000, 77)}))  # unchanged: no error
    _memory_file("b.tar", b"b" * 5000)
    with pytest.raises(ResumeError, match=r"b.tar changed \(same size, different content\)"):
        check_inputs("t2i", saved, input_record([path], {path: (5000, 77)}))
    with pytest.raises(ResumeError, match=r"b.tar changed \(same size, modified since\)"):
        check_inputs("t2i", saved, input_record([path], {path: (5000, 78)}))


def test_a_file_used_twice_is_recorded_once(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("{}\n")
    assert input_record([str(path), str(path)]) == input_record([str(path)])
    assert input_record([str(path), str(path)])["count"] == 1


def test_a_checkpoint_of_sizes_only_compares_sizes():
    saved = {"count": 1, "digest": "old", "files": [["/d/a.parquet", 100]]}
    current = {"count": 1, "digest": "new", "files": [["/d/a.parquet", 100, "1234"]]}
    check_inputs("g", saved, current)  # same size: the old record says no more
    with pytest.raises(ResumeError, match="100 bytes then, 101 now"):
        check_inputs("g", saved, {**current, "files": [["/d/a.parquet", 101, "1234"]]})


def test_the_older_stamp_reads_its_tail_after_its_head(tmp_path):
    import hashlib

    from bagel_data.checkpoint import inputs

    path = tmp_path / "a.jsonl"
    data = bytes(range(256)) * 400  # 102400 bytes: between one and two 64 KiB ends
    path.write_bytes(data)
    expected = hashlib.sha256(data[: 1 << 16] + data[1 << 16 :]).hexdigest()[:16]
    assert inputs._legacy_hash(str(path), len(data)) == expected
