"""The text-to-image family (SPEC sections 3, 4 T2I, 6, 8.1, 8.5)."""

from __future__ import annotations

import collections
import itertools
import os

import pytest
import torch

from bagel_data.errors import BadSampleError, SkipReason
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.sources.parquet import ParquetReader
from helpers.builders import png_bytes, solid_jpeg, write_t2i

TRANSFORM = ImageTransform(32, 16, 16)
IMAGE = solid_jpeg(16, 16, (200, 30, 30))


def _row(*captions, image=IMAGE) -> dict:
    return {"image": image, "captions": {f"k{i}": text for i, text in enumerate(captions)}}


def _dataset(folder, tokenizer, num_used=None, **kwargs) -> T2IIterableDataset:
    if num_used is None:
        num_used = len([n for n in os.listdir(folder) if n.endswith(".parquet")])
    kwargs.setdefault("num_workers", 1)
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(folder)], [num_used], **kwargs)
    # Positions and order here are the walk by units' (tars', a user family's, compat's); the
    # default walk by rows is tests/test_row_walk.py's.
    dataset.units.walk_by_rows = False
    return dataset


def _take(dataset, n) -> list[dict]:
    return list(itertools.islice(iter(dataset), n))


def _text(sample, tokenizer) -> str:
    return tokenizer.decode(sample["text_ids_list"][0])


# -- file listing -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "num_used, expected",
    [(2, "ab"), (3, "abc"), (7, "abcabca"), (6, "abcabc")],
    ids=["fewer", "equal", "more-truncated", "more-exact"],
)
def test_num_used_data_repeats_files_in_sorted_order(tmp_path, tokenizer, num_used, expected):
    write_t2i(tmp_path, [[[_row("x")]]] * 3, names=["c.parquet", "a.parquet", "b.parquet"])
    dataset = _dataset(tmp_path, tokenizer, num_used)
    assert dataset.data_paths == [os.path.join(str(tmp_path), f"{name}.parquet") for name in expected]


def test_non_parquet_files_are_ignored(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[_row("x")]]] * 2, names=["a.parquet", "b.parquet"])
    (tmp_path / "notes.txt").write_text("not data")
    (tmp_path / "parquet_info.json").write_text("{}")
    assert _dataset(tmp_path, tokenizer, 2).data_paths == [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]


def test_sorted_listing_ignores_os_listdir_order(tmp_path, tokenizer, monkeypatch):
    write_t2i(tmp_path, [[[_row("x")]]] * 3, names=["a.parquet", "b.parquet", "c.parquet"])
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path: sorted(real_listdir(path), reverse=True))
    sorted_paths = _dataset(tmp_path, tokenizer, 2).data_paths
    assert sorted_paths == [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    # The reference's filesystem order is still available on request, and here differs.
    listed = _dataset(tmp_path, tokenizer, 2, file_order="filesystem").data_paths
    assert listed == [str(tmp_path / "c.parquet"), str(tmp_path / "b.parquet")]


# -- samples ------------------------------------------------------------------------------
def test_sample_schema(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[_row("a red square")]]])
    (sample,) = _take(_dataset(tmp_path, tokenizer), 1)
    ids = tokenizer.encode("a red square")
    assert sample["text_ids_list"] == [ids]
    assert [(p["type"], p["enable_cfg"], p["loss"]) for p in sample["sequence_plan"]] == [
        ("text", 1, 0),
        ("vae_image", 0, 1),
    ]
    assert all(p["special_token_loss"] == 0 and p["special_token_label"] is None for p in sample["sequence_plan"])
    (image,) = sample["image_tensor_list"]
    assert tuple(image.shape) == (3, 16, 16) and image.dtype == torch.float32
    assert sample["num_tokens"] == len(ids) + 16 * 16 // 16**2
    assert sample["data_indexes"] == {"data_indexes": [0, 0, 0], "worker_id": 0, "dataset_name": "t2i"}


def test_sample_at_rebuilds_the_streamed_sample_as_tensors(tmp_path, tokenizer):
    """The cursor protocol a caller (or the packer, on resume) uses: the sample at a cursor
    is the one the stream gave there, with its images as float tensors unless asked for
    pending ones."""
    write_t2i(tmp_path, [[[_row("one", "uno"), _row("two", "dos")]]])
    dataset = _dataset(tmp_path, tokenizer)
    streamed = list(itertools.islice(dataset.iter_samples(), 2))
    cursor, sample = streamed[1]
    again = dataset.sample_at(cursor)
    assert again["text_ids_list"] == sample["text_ids_list"]
    assert isinstance(again["image_tensor_list"][0], torch.Tensor)
    assert torch.equal(again["image_tensor_list"][0], sample["image_tensor_list"][0])


def test_sample_at_a_row_that_gives_no_sample_is_none_and_counted(tmp_path, tokenizer):
    write_t2i(tmp_path, [[BAD_ROWS]])
    dataset = _dataset(tmp_path, tokenizer)
    (cursor, _), _ = list(itertools.islice(dataset.iter_samples(), 2))
    bad = (*cursor[:-1], cursor[-1] + 1)  # the row after the first good one is a bad one
    log = dataset.new_skip_log()
    assert dataset.sample_at(bad, log=log) is None and log.total() == 1


def test_caption_drawn_uniformly_each_pass(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[_row("alpha", "bravo", "charlie")]]])
    draws = [_text(s, tokenizer) for s in _take(_dataset(tmp_path, tokenizer), 600)]
    counts = collections.Counter(draws)
    assert set(counts) == {"alpha", "bravo", "charlie"}
    # Binomial(600, 1/3): mean 200, sd 11.5; +-60 is over 5 sd.
    assert all(140 <= c <= 260 for c in counts.values()), counts
    # Consecutive passes re-draw: the sequence is not constant and not a simple cycle.
    assert len(set(itertools.pairwise(draws))) == 9


def test_caption_choice_reproducible_with_same_seed(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[_row("alpha", "bravo", "charlie")] * 5]])

    def run(seed):
        dataset = _dataset(tmp_path, tokenizer)
        dataset.set_epoch(seed)
        return [_text(s, tokenizer) for s in _take(dataset, 60)]

    assert run(42) == run(42)
    assert run(5) == run(5)
    assert run(5) != run(42)


def test_empty_caption_object_gives_a_space(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[{"image": IMAGE, "captions": "{}"}]]])
    (sample,) = _take(_dataset(tmp_path, tokenizer), 1)
    assert sample["text_ids_list"] == [tokenizer.encode(" ")]
    assert sample["num_tokens"] == len(tokenizer.encode(" ")) + 1


# -- bad rows -----------------------------------------------------------------------------
BAD_ROWS = [
    _row("good zero"),
    {"image": IMAGE, "captions": "not json {"},
    _row("good two"),
    {"image": b"\xff\xd8\xff corrupt", "captions": '{"a": "broken image"}'},
    _row("good four"),
    {"image": IMAGE, "captions": '["a list", "not an object"]'},
    {"image": png_bytes(8, 8)[:40], "captions": '{"a": "truncated"}'},
]


def test_bad_rows_skipped_and_counted(tmp_path, tokenizer):
    write_t2i(tmp_path, [[BAD_ROWS]])
    dataset = _dataset(tmp_path, tokenizer)
    samples = _take(dataset, 4)  # one full pass (3 good rows) and the first row of the next
    assert [_text(s, tokenizer) for s in samples] == ["good zero", "good two", "good four", "good zero"]
    assert [s["data_indexes"]["data_indexes"] for s in samples] == [[0, 0, 0], [0, 0, 2], [0, 0, 4], [0, 0, 0]]
    assert dict(dataset.skip_log.counts) == {
        SkipReason.CAPTION_INVALID.value: 2,
        SkipReason.IMAGE_DECODE.value: 2,
    }


def test_an_unreadable_row_group_is_skipped_whole_and_the_next_one_is_read(tmp_path, tokenizer, monkeypatch):
    write_t2i(tmp_path, [[[_row("a0"), _row("a1")], [_row("b0")], [_row("c0"), _row("c1")]]])
    real = ParquetReader.read_row_group

    def read_row_group(self, row_group, columns):
        if row_group == 1:
            raise OSError("corrupt page")
        return real(self, row_group, columns)

    monkeypatch.setattr(ParquetReader, "read_row_group", read_row_group)
    dataset = _dataset(tmp_path, tokenizer)
    assert [_text(s, tokenizer) for s in _take(dataset, 4)] == ["a0", "a1", "c0", "c1"]
    assert dict(dataset.skip_log.counts) == {SkipReason.ROW_GROUP_UNREADABLE.value: 1}


def test_missing_column_file_skipped_with_schema_reason(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[_row("good")]], [[{"image": IMAGE}]]], names=["a.parquet", "b.parquet"])
    dataset = _dataset(tmp_path, tokenizer, 2)
    order, _ = dataset.get_data_paths_per_worker()
    samples = _take(dataset, 2)
    assert [_text(s, tokenizer) for s in samples] == ["good", "good"]
    # Pass 1 sees b once; pass 2 sees it again only if it comes before a.
    expected = 1 + (order[0].endswith("b.parquet"))
    assert dict(dataset.skip_log.counts) == {SkipReason.SCHEMA.value: expected}
    dataset.strict = True
    with pytest.raises(BadSampleError) as info:
        list(itertools.islice(iter(dataset), 2))
    assert info.value.reason is SkipReason.SCHEMA
    assert info.value.location == str(tmp_path / "b.parquet")


def test_strict_mode_raises_with_location(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[_row("g0")], [_row("g1"), {"image": IMAGE, "captions": "nope"}]]])
    dataset = _dataset(tmp_path, tokenizer)
    dataset.strict = True
    iterator = iter(dataset)
    assert [_text(next(iterator), tokenizer) for _ in range(2)] == ["g0", "g1"]
    with pytest.raises(BadSampleError) as info:
        next(iterator)
    assert info.value.reason is SkipReason.CAPTION_INVALID
    message = str(info.value)
    assert str(tmp_path / "part-000.parquet") in message
    assert "row group 1" in message and "row 1" in message


def test_strict_mode_corrupt_image(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[{"image": b"garbage", "captions": '{"a": "b"}'}]]])
    dataset = _dataset(tmp_path, tokenizer)
    dataset.strict = True
    with pytest.raises(BadSampleError) as info:
        next(iter(dataset))
    assert info.value.reason is SkipReason.IMAGE_DECODE
    assert "row group 0, row 0" in str(info.value)


# -- resume -------------------------------------------------------------------------------
def _resume_data(tmp_path):
    files = [
        [[_row("f0 g0 r0"), _row("f0 g0 r1")], [_row("f0 g1 r0"), _row("f0 g1 r1"), _row("f0 g1 r2")]],
        [[_row("f1 g0 r0")], [_row("f1 g1 r0", "f1 g1 r0 alt")]],
    ]
    write_t2i(tmp_path, files)


def _stream(dataset, n, tokenizer):
    return [(s["data_indexes"]["data_indexes"], _text(s, tokenizer)) for s in _take(dataset, n)]


def test_resume_restarts_just_after_position(tmp_path, tokenizer):
    _resume_data(tmp_path)
    full = _stream(_dataset(tmp_path, tokenizer), 16, tokenizer)
    per_pass = 7
    assert [pos for pos, _ in full[:per_pass]] == [pos for pos, _ in full[per_pass : 2 * per_pass]]
    for k in range(per_pass):
        position = full[k][0]
        resumed = _dataset(tmp_path, tokenizer, data_status=[position])
        assert _stream(resumed, 8, tokenizer) == full[k + 1 : k + 9], f"resume after {position}"


def test_resume_uses_this_workers_entry(tmp_path, tokenizer):
    from helpers.golden import as_worker

    _resume_data(tmp_path)
    for worker in range(2):
        with as_worker(worker, 2):
            full = _stream(_dataset(tmp_path, tokenizer, num_workers=2), 4, tokenizer)
            status = [[9, 9, 9], [9, 9, 9]]
            status[worker] = full[0][0]
            resumed = _stream(_dataset(tmp_path, tokenizer, num_workers=2, data_status=status), 3, tokenizer)
        assert resumed == full[1:4]
