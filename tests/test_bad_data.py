"""Bad inputs get a named, counted outcome, and the good rows around them still come through.

Complements the per-family tests with the cases they do not build: truncated and oversized
images, unreadable videos, wrong column types, empty folders, text that tokenizes to
nothing, and the bound on consecutive failures.
"""

from __future__ import annotations

import itertools
import struct
import zlib

import pyarrow as pa
import pytest

from bagel_data import ConfigError, FrameSampler, ImageTransform, SftJSONLIterableDataset, T2IIterableDataset
from bagel_data.errors import SkipLog, TooManyFailuresError
from helpers.builders import solid_jpeg, write_parquet, write_t2i, write_vlm

# Positions, orders and unit counts here are the walk by whole units' (tars', a user family's,
# compat's); the default walk by rows is tests/test_row_walk.py's.
pytestmark = pytest.mark.walk_by_units


GOOD = {"image": solid_jpeg(64, 48), "captions": {"c": "a red square"}}
TRANSFORM = ImageTransform(64, 32, 16)


def huge_png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height pixels (no pixel data): a bomb's shape."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 8))


def t2i(folder, tokenizer, files=None) -> T2IIterableDataset:
    return T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(folder)], [files or 1], num_workers=1)


def one_pass(dataset) -> tuple[list, SkipLog]:
    log = SkipLog(dataset.dataset_name)
    samples = [sample for _, sample in dataset.iter_pass(log)]
    return samples, log


@pytest.mark.parametrize(
    "bad_image, reason",
    [
        (solid_jpeg(64, 48)[:200], "image_decode_failed"),  # truncated
        (b"\x00garbage" * 10, "image_decode_failed"),  # corrupt
        (huge_png_header(20_000, 20_000), "image_over_pixel_limit"),  # decompression bomb
    ],
)
def test_bad_image_bytes_are_named_and_nothing_else_is_lost(tmp_path, tokenizer, bad_image, reason):
    write_t2i(tmp_path, [[[GOOD, {"image": bad_image, "captions": {"c": "x"}}, GOOD]]])
    samples, log = one_pass(t2i(tmp_path, tokenizer))
    assert log.as_dict() == {reason: 1}
    assert [s["data_indexes"]["data_indexes"] for s in samples] == [[0, 0, 0], [0, 0, 2]]


def test_wrong_column_type_is_a_schema_skip(tmp_path, tokenizer):
    rows = [{"image": "not bytes", "captions": '{"c": "x"}'}, {"image": "again", "captions": '{"c": "y"}'}]
    write_parquet(tmp_path / "part-0.parquet", [rows], {"image": pa.string(), "captions": pa.string()})
    samples, log = one_pass(t2i(tmp_path, tokenizer))
    assert samples == [] and log.as_dict() == {"row_schema_invalid": 2}


def test_empty_caption_object_and_empty_text(tmp_path, tokenizer):
    """`{}` trains unconditionally with the caption " " (the reference's rule); an empty string
    caption gives an empty text item, which the packer lays out as bos + eos."""
    write_t2i(tmp_path, [[[{"image": GOOD["image"], "captions": {}}, {"image": GOOD["image"], "captions": {"c": ""}}]]])
    samples, log = one_pass(t2i(tmp_path, tokenizer))
    assert log.as_dict() == {}
    assert samples[0]["text_ids_list"] == [tokenizer.encode(" ")]
    assert samples[1]["text_ids_list"] == [[]]


def test_empty_folder_is_a_construction_error(tmp_path, tokenizer):
    with pytest.raises(ConfigError, match="no \\*.parquet files"):
        t2i(tmp_path, tokenizer)


def test_unreadable_video_is_named(tmp_path, tokenizer):
    rows = [
        {
            "video": "broken.mp4",
            "conversations": [{"from": "human", "value": "<video> what?"}, {"from": "gpt", "value": "x"}],
        },
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
    ]
    jsonl, images = write_vlm(tmp_path, rows, {"broken.mp4": b"not a video at all"})
    dataset = SftJSONLIterableDataset(
        "vlm", ImageTransform(56, 28, 14), tokenizer, FrameSampler(4, 2), [jsonl], [images], [10], num_workers=1
    )
    samples, log = one_pass(dataset)
    assert log.as_dict() == {"video_decode_failed": 1} and len(samples) == 1


def test_text_that_tokenizes_to_nothing(tmp_path, tokenizer):
    rows = [
        {"conversations": [{"from": "human", "value": ""}, {"from": "gpt", "value": ""}]},
        {"conversations": [{"from": "human", "value": ""}, {"from": "gpt", "value": "yes"}]},
    ]
    jsonl, images = write_vlm(tmp_path, rows)
    dataset = SftJSONLIterableDataset(
        "vlm", ImageTransform(56, 28, 14), tokenizer, None, [jsonl], [images], [10], num_workers=1
    )
    samples, log = one_pass(dataset)
    assert log.as_dict() == {"no_loss_item": 1}
    assert [item["type"] for item in samples[0]["sequence_plan"]] == ["text"]  # the empty question is left out


def test_consecutive_failures_stop_with_a_clear_error(tmp_path, tokenizer):
    bad = {"image": b"junk", "captions": {"c": "x"}}
    write_t2i(tmp_path, [[[bad] * 8]])
    dataset = t2i(tmp_path, tokenizer)
    dataset.max_consecutive_failures = 5
    with pytest.raises(TooManyFailuresError, match="likely broken"):
        next(iter(dataset))


def test_a_family_built_on_its_own_allows_100_failures_in_a_row(tmp_path, tokenizer):
    """Without `max_consecutive_failures` a family has the entry points' default bound, 100."""
    bad = {"image": b"junk", "captions": {"c": "x"}}
    write_t2i(tmp_path, [[[bad] * 101 + [GOOD]]])
    with pytest.raises(TooManyFailuresError, match="101 consecutive rows failed"):
        next(iter(t2i(tmp_path, tokenizer)))


def test_failure_bound_resets_on_a_good_row(tmp_path, tokenizer):
    bad = {"image": b"junk", "captions": {"c": "x"}}
    write_t2i(tmp_path, [[[bad] * 4 + [GOOD] + [bad] * 4 + [GOOD]]])
    dataset = t2i(tmp_path, tokenizer)
    dataset.max_consecutive_failures = 5
    assert len(list(itertools.islice(iter(dataset), 4))) == 4
