"""The VLM SFT family (SPEC sections 3 VLM, 4 VLM, 6, 8.4, 8.6)."""

from __future__ import annotations

import collections
import itertools
import json
import random

import pytest

from bagel_data.errors import BadSampleError, SkipReason
from bagel_data.families.vlm import SftJSONLIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.media.video import FrameSampler
from helpers.builders import png_bytes, write_video, write_vlm

# 64 x 64 images stay 64 x 64 alone, but two share max_pixels and become 32 x 32.
TRANSFORM = ImageTransform(64, 16, 16, max_pixels=64 * 64)
IMAGES = {"a.png": png_bytes(64, 64, (40, 40, 40)), "b.png": png_bytes(64, 64, (200, 200, 200))}
SAMPLER = FrameSampler(max_num_frames=4, min_num_frames=2)


def _dataset(jsonl, image_dir, tokenizer, num_used=10**6, frame_sampler=None, **kwargs):
    kwargs.setdefault("num_workers", 1)
    jsonls, dirs = (jsonl, image_dir) if isinstance(jsonl, list) else ([jsonl], [image_dir])
    nums = num_used if isinstance(num_used, list) else [num_used] * len(jsonls)
    dataset = SftJSONLIterableDataset("vlm", TRANSFORM, tokenizer, frame_sampler, jsonls, dirs, nums, **kwargs)
    # Positions and order here are the walk by units' (tars', a user family's, compat's); the
    # default walk by rows is tests/test_row_walk.py's.
    dataset.units.walk_by_rows = False
    return dataset


def _conv(*turns) -> list[dict]:
    """_conv(("human", "q"), ("gpt", "a"), ...)"""
    return [{"from": role, "value": value} for role, value in turns]


def _grey(tensor) -> int:
    return round((float(tensor.mean()) * 0.5 + 0.5) * 255)


def _plan(sample, tokenizer) -> list[tuple]:
    """(type, loss, decoded text | grey level) per plan item; checks the item flags."""
    images, texts = iter(sample["image_tensor_list"]), iter(sample["text_ids_list"])
    out = []
    for item in sample["sequence_plan"]:
        assert item["enable_cfg"] == 0
        if item["type"] == "text":
            out.append(("text", item["loss"], tokenizer.decode(next(texts))))
        else:
            assert item["type"] == "vit_image" and item["loss"] == 0
            out.append(("image", 0, _grey(next(images))))
    return out


def _first_sample(tmp_path, tokenizer, row, images=IMAGES, frame_sampler=None):
    jsonl, image_dir = write_vlm(tmp_path, [row], images)
    return next(iter(_dataset(jsonl, image_dir, tokenizer, frame_sampler=frame_sampler)))


# -- line selection -----------------------------------------------------------------------
def _rows(count: int, tag: str = "q") -> list[dict]:
    return [{"conversations": _conv(("human", f"{tag}{i}"), ("gpt", f"a{i}"))} for i in range(count)]


def _entries(dataset) -> list[tuple[str, str]]:
    return [dataset.data_paths[i] for i in range(len(dataset.data_paths))]


def _worker_entries(dataset) -> list[tuple[str, str]]:
    """This worker's (line, folder) entries in iteration order (units are line indexes)."""
    return [dataset.data_paths[int(dataset.epoch_units[int(i)])] for i in dataset.worker_shard().unit_ids]


def test_get_data_paths_per_worker_gives_reference_entries(tmp_path, tokenizer):
    jsonl, image_dir = write_vlm(tmp_path, _rows(4))
    dataset = _dataset(jsonl, image_dir, tokenizer)
    paths, worker_id = dataset.get_data_paths_per_worker()
    assert worker_id == 0
    assert paths == _worker_entries(dataset)


@pytest.mark.parametrize("seed", [0, 3, 17])
def test_shuffle_lines_keeps_first_n_after_seeded_shuffle(tmp_path, tokenizer, seed):
    jsonl, image_dir = write_vlm(tmp_path, _rows(12))
    dataset = _dataset(jsonl, image_dir, tokenizer, num_used=5, shuffle_lines=True, shuffle_seed=seed)
    with open(jsonl) as handle:
        lines = handle.readlines()
    random.Random(seed).shuffle(lines)
    assert _entries(dataset) == sorted((line, image_dir) for line in lines[:5])


def test_shuffle_seed_changes_the_kept_lines(tmp_path, tokenizer):
    jsonl, image_dir = write_vlm(tmp_path, _rows(12))
    kept = [
        {line for line, _ in _entries(_dataset(jsonl, image_dir, tokenizer, 5, shuffle_lines=True, shuffle_seed=s))}
        for s in (0, 1)
    ]
    assert kept[0] != kept[1]


def test_no_shuffle_keeps_the_first_lines(tmp_path, tokenizer):
    jsonl, image_dir = write_vlm(tmp_path, _rows(12))
    with open(jsonl) as handle:
        lines = handle.readlines()
    assert _entries(_dataset(jsonl, image_dir, tokenizer, 4)) == sorted((line, image_dir) for line in lines[:4])
    assert len(_dataset(jsonl, image_dir, tokenizer, 100).data_paths) == 12  # more than there are: all


def test_data_paths_are_line_text_and_folder_sorted(tmp_path, tokenizer):
    jsonl_a, dir_a = write_vlm(tmp_path / "a", _rows(3) + _rows(1, "z"))
    jsonl_b, dir_b = write_vlm(tmp_path / "b", _rows(2))  # the same first two lines, other folder
    dataset = _dataset([jsonl_a, jsonl_b], [dir_a, dir_b], tokenizer, num_used=[4, 2])
    lines = [json.dumps(row) + "\n" for row in _rows(3) + _rows(1, "z")]
    expected = sorted([(line, dir_a) for line in lines] + [(line, dir_b) for line in lines[:2]])
    assert _entries(dataset) == expected
    assert all(isinstance(text, str) and isinstance(folder, str) for text, folder in expected)
    assert dataset.data_paths[1:3] == expected[1:3]


def test_index_costs_16_bytes_per_line(tmp_path, tokenizer):
    jsonl, image_dir = write_vlm(tmp_path, _rows(37))
    index = _dataset(jsonl, image_dir, tokenizer, 30).data_paths
    n = len(index)
    assert n == 30
    assert index.offsets.nbytes + index.line_numbers.nbytes + index.file_ids.nbytes == 16 * n
    # No per-line Python sequence (`_mapped` is the folder of the node's mapped copy, a path).
    held = [value for name, value in vars(index).items() if name != "_mapped"]
    assert not any(isinstance(value, (list, str, bytes)) and len(value) >= n for value in held)


def test_crlf_lines_read_like_text_mode(tmp_path, tokenizer):
    jsonl, image_dir = write_vlm(tmp_path, [])
    rows = _rows(3)
    with open(jsonl, "wb") as handle:
        handle.write(b"".join(json.dumps(row).encode() + b"\r\n" for row in rows))
    dataset = _dataset(jsonl, image_dir, tokenizer)
    assert _entries(dataset) == sorted((json.dumps(row) + "\n", image_dir) for row in rows)
    assert len(list(itertools.islice(iter(dataset), 3))) == 3


def test_lone_cr_lines_read_like_text_mode(tmp_path, tokenizer):
    jsonl, image_dir = write_vlm(tmp_path, [])
    rows = _rows(3)
    with open(jsonl, "wb") as handle:
        handle.write(b"".join(json.dumps(row).encode() + b"\r" for row in rows))
    dataset = _dataset(jsonl, image_dir, tokenizer)
    assert _entries(dataset) == sorted((json.dumps(row) + "\n", image_dir) for row in rows)


# -- the conversation rule ----------------------------------------------------------------
def test_conversation_rule_with_two_images(tmp_path, tokenizer):
    row = {
        "image": ["a.png", "b.png"],
        "conversations": _conv(
            ("human", "  Look at <image> and\n<image>  compare. "),
            ("gpt", " They differ. "),
            ("system", "ignored turn"),
            ("human", "  Why?  "),
            ("gpt", "Because."),
            ("gpt", ""),  # tokenizes to nothing: left out
        ),
    }
    sample = _first_sample(tmp_path, tokenizer, row)
    assert _plan(sample, tokenizer) == [
        ("text", 0, "Look at"),
        ("image", 0, 40),
        ("text", 0, "and"),
        ("image", 0, 200),
        ("text", 0, "compare."),
        ("text", 1, " They differ. "),
        ("text", 0, "  Why?  "),
        ("text", 1, "Because."),
    ]
    assert [tuple(t.shape) for t in sample["image_tensor_list"]] == [(3, 32, 32)] * 2  # img_num = 2
    text_tokens = sum(len(ids) for ids in sample["text_ids_list"])
    assert sample["num_tokens"] == text_tokens + 2 * (32 * 32 // 16**2)
    assert sample["text_ids_list"][0] == tokenizer.encode("Look at")
    assert sample["data_indexes"] == {"data_indexes": 0, "worker_id": 0, "dataset_name": "vlm"}


@pytest.mark.parametrize(
    "human, expected",
    [
        ("<image>\nDescribe.", [("image", 0, 40), ("text", 0, "Describe.")]),
        ("What is this?<image>", [("text", 0, "What is this?"), ("image", 0, 40)]),
        ("   <image>   ", [("image", 0, 40)]),
    ],
    ids=["leading-tag", "trailing-tag", "blank-pieces"],
)
def test_blank_pieces_dropped_single_image(tmp_path, tokenizer, human, expected):
    row = {"image": "a.png", "conversations": _conv(("human", human), ("gpt", "Answer"))}
    sample = _first_sample(tmp_path, tokenizer, row)
    assert _plan(sample, tokenizer) == expected + [("text", 1, "Answer")]
    assert tuple(sample["image_tensor_list"][0].shape) == (3, 64, 64)  # img_num = 1


def test_adjacent_tags_and_tags_in_two_turns(tmp_path, tokenizer):
    row = {
        "image": ["b.png", "a.png"],
        "conversations": _conv(("human", "<image>"), ("gpt", "one"), ("human", "and <image>"), ("gpt", "two")),
    }
    assert _plan(_first_sample(tmp_path, tokenizer, row), tokenizer) == [
        ("image", 0, 200),
        ("text", 1, "one"),
        ("text", 0, "and"),
        ("image", 0, 40),
        ("text", 1, "two"),
    ]
    row = {"image": ["a.png", "b.png"], "conversations": _conv(("human", "<image><image>"), ("gpt", "x"))}
    assert _plan(_first_sample(tmp_path / "2", tokenizer, row), tokenizer) == [
        ("image", 0, 40),
        ("image", 0, 200),
        ("text", 1, "x"),
    ]


def test_text_only_row(tmp_path, tokenizer):
    row = {"conversations": _conv(("human", "Hi"), ("gpt", "Hello"))}
    sample = _first_sample(tmp_path, tokenizer, row)
    assert _plan(sample, tokenizer) == [("text", 0, "Hi"), ("text", 1, "Hello")]
    assert sample["image_tensor_list"] == []


def test_change_format_matches_rule(tmp_path, tokenizer):
    jsonl, image_dir = write_vlm(tmp_path, _rows(1))
    dataset = _dataset(jsonl, image_dir, tokenizer)
    data = {"conversations": _conv(("human", "a <image> b"), ("gpt", "c"), ("other", "d"))}
    assert dataset.change_format(data, 1) == [
        {"type": "text", "has_loss": 0, "text": "a"},
        {"type": "image"},
        {"type": "text", "has_loss": 0, "text": "b"},
        {"type": "text", "has_loss": 1, "text": "c"},
    ]


# -- video --------------------------------------------------------------------------------
def _video_row(*turns) -> dict:
    return {"video": "clip.mp4", "conversations": _conv(*turns)}


def test_video_in_a_later_human_turn(tmp_path, tokenizer):
    row = _video_row(("human", "Hello"), ("gpt", "Hi!"), ("human", "Watch <video> then answer."), ("gpt", "Done."))
    image_dir = tmp_path / "images"
    image_dir.mkdir()
    write_video(image_dir / "clip.mp4", num_frames=12, size=(32, 24))
    samples = []
    for _ in range(2):  # two fresh datasets: the same frames
        jsonl, _ = write_vlm(tmp_path, [row])
        samples.append(next(iter(_dataset(jsonl, str(image_dir), tokenizer, frame_sampler=SAMPLER))))
    plan = _plan(samples[0], tokenizer)
    frames = [grey for kind, _, grey in plan if kind == "image"]
    assert 2 <= len(frames) <= 4
    assert plan == [
        ("text", 0, "Hello"),
        ("text", 1, "Hi!"),
        ("text", 0, "Watch"),
        *[("image", 0, grey) for grey in frames],
        ("text", 0, "then answer."),
        ("text", 1, "Done."),
    ]
    assert frames == sorted(frames) and len(set(frames)) == len(frames)  # one frame per segment, in order
    assert all(0 <= grey <= 120 for grey in frames)
    assert _plan(samples[1], tokenizer) == plan
    # Frames are 32 x 24 and go through the transform with img_num = number of frames.
    expected_size = TRANSFORM.target_size(32, 24, len(frames))
    assert all(tuple(t.shape) == (3, expected_size[1], expected_size[0]) for t in samples[0]["image_tensor_list"])


# -- bad rows -----------------------------------------------------------------------------
GOOD = {"image": "a.png", "conversations": _conv(("human", "<image> good"), ("gpt", "yes"))}
BAD = [
    ('{"conversations": [', SkipReason.JSON_INVALID),
    (
        {"image": ["a.png", "b.png"], "conversations": _conv(("human", "<image> one tag"), ("gpt", "x"))},
        SkipReason.PLACEHOLDER_MISMATCH,
    ),
    ({"image": "a.png", "conversations": _conv(("human", "no tag"), ("gpt", "x"))}, SkipReason.PLACEHOLDER_MISMATCH),
    ({"conversations": _conv(("human", "<image> no image"), ("gpt", "x"))}, SkipReason.PLACEHOLDER_MISMATCH),
    (_video_row(("human", "no video tag"), ("gpt", "x")), SkipReason.VIDEO_TAG_MISSING),
    ({"image": "missing.png", "conversations": _conv(("human", "<image>"), ("gpt", "x"))}, SkipReason.IMAGE_MISSING),
    ({"conversations": _conv(("human", "question only"))}, SkipReason.NO_LOSS),
    ({"conversations": _conv(("human", "q"), ("gpt", ""))}, SkipReason.NO_LOSS),
    ({"image": "a.png"}, SkipReason.SCHEMA),
    ({"conversations": []}, SkipReason.SCHEMA),
    ({"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": 7}]}, SkipReason.SCHEMA),
    ({"conversations": [{"from": None, "value": "q"}, {"from": "gpt", "value": "a"}]}, SkipReason.SCHEMA),
    ({"image": ["a.png", 3], "conversations": _conv(("human", "<image><image>"), ("gpt", "x"))}, SkipReason.SCHEMA),
]


def _write_bad_dataset(tmp_path, rows):
    image_dir = tmp_path / "images"
    image_dir.mkdir(parents=True)
    write_video(image_dir / "clip.mp4", num_frames=6, size=(16, 16))
    return write_vlm(tmp_path, rows, IMAGES)


def test_bad_rows_skipped_and_counted(tmp_path, tokenizer):
    rows = [GOOD] + [row for row, _ in BAD]
    jsonl, image_dir = _write_bad_dataset(tmp_path, rows)
    reason_of = {(row if isinstance(row, str) else json.dumps(row)): reason.value for row, reason in BAD}
    dataset = _dataset(jsonl, image_dir, tokenizer, frame_sampler=SAMPLER)
    order = [line.rstrip("\n") for line, _ in _worker_entries(dataset)]
    good_at = order.index(json.dumps(GOOD))
    samples = list(itertools.islice(iter(dataset), 2))  # the whole first pass and the start of the next
    assert [s["data_indexes"]["data_indexes"] for s in samples] == [good_at, good_at]
    expected = collections.Counter(reason_of.values()) + collections.Counter(reason_of[t] for t in order[:good_at])
    assert dict(dataset.skip_log.counts) == dict(expected)


@pytest.mark.parametrize("bad, reason", BAD, ids=[reason.value + str(i) for i, (_, reason) in enumerate(BAD)])
def test_strict_mode_names_the_reason_and_line(tmp_path, tokenizer, bad, reason):
    jsonl, image_dir = _write_bad_dataset(tmp_path, [GOOD, bad])
    dataset = _dataset(jsonl, image_dir, tokenizer, frame_sampler=SAMPLER)
    dataset.strict = True
    with pytest.raises(BadSampleError) as info:
        list(itertools.islice(iter(dataset), 3))
    assert info.value.reason is reason
    assert info.value.location == f"{jsonl}, line 2"


def test_video_row_without_frame_sampler_is_skipped(tmp_path, tokenizer):
    row = _video_row(("human", "<video>"), ("gpt", "x"))
    jsonl, image_dir = _write_bad_dataset(tmp_path, [GOOD, row])
    dataset = _dataset(jsonl, image_dir, tokenizer, frame_sampler=None)
    dataset.strict = True
    with pytest.raises(BadSampleError) as info:
        list(itertools.islice(iter(dataset), 3))
    assert info.value.reason is SkipReason.VIDEO_DECODE


def test_positions_are_row_indexes_in_worker_list(tmp_path, tokenizer):
    jsonl, image_dir = write_vlm(tmp_path, _rows(5))
    dataset = _dataset(jsonl, image_dir, tokenizer)
    order = [line for line, _ in _worker_entries(dataset)]
    samples = list(itertools.islice(iter(dataset), 7))
    assert [s["data_indexes"]["data_indexes"] for s in samples] == [0, 1, 2, 3, 4, 0, 1]
    answers = [tokenizer.decode(s["text_ids_list"][1]) for s in samples[:5]]
    assert answers == [json.loads(line)["conversations"][1]["value"] for line in order]


def test_resume_after_row(tmp_path, tokenizer):
    jsonl, image_dir = write_vlm(tmp_path, _rows(5))
    resumed = _dataset(jsonl, image_dir, tokenizer, data_status=[2])
    positions = [s["data_indexes"]["data_indexes"] for s in itertools.islice(iter(resumed), 4)]
    assert positions == [3, 4, 0, 1]
