"""The image-editing family (SPEC sections 3 Edit, 4 Edit, 8.4)."""

from __future__ import annotations

import collections
import itertools
import math

import pytest

import bagel_data.families.edit as edit_module
import bagel_data.families.media as media_module
from bagel_data.errors import BadSampleError, ConfigError, SkipReason
from bagel_data.families import parquet_info
from bagel_data.families.edit import UnifiedEditIterableDataset
from bagel_data.media.images import ImageTransform
from helpers.builders import png_bytes, write_edit

VAE = ImageTransform(32, 16, 16)  # 32 x 32 sources stay 32 x 32: 4 tokens
VIT = ImageTransform(28, 14, 14)  # ... and become 28 x 28: 4 tokens
GREYS = [30, 80, 130, 180, 230]
IMAGES = [png_bytes(32, 32, (g, g, g)) for g in GREYS]


def _chain(n: int, phrasings=None) -> dict:
    """A row of n images; step s (image s-1 -> s) has phrasings ["step{s}"] by default."""
    return {
        "image_list": IMAGES[:n],
        "instruction_list": [list(phrasings[s - 1]) if phrasings else [f"step{s}"] for s in range(1, n)],
    }


def _dataset(folder, tokenizer, info, num_used=1, **kwargs) -> UnifiedEditIterableDataset:
    kwargs.setdefault("num_workers", 1)
    return UnifiedEditIterableDataset("edit", VAE, tokenizer, VIT, [str(folder)], [num_used], info, **kwargs)


def _image_index(tensor) -> int:
    """Which of IMAGES a transformed tensor shows, read from its (solid) grey level."""
    grey = round((float(tensor.mean()) * 0.5 + 0.5) * 255)
    (index,) = [i for i, g in enumerate(GREYS) if abs(g - grey) <= 2]
    return index


def _signature(sample, tokenizer) -> tuple:
    """The plan as (type, cfg, loss, image index | decoded text), checking shapes on the way."""
    images, texts = iter(sample["image_tensor_list"]), iter(sample["text_ids_list"])
    items, num_tokens = [], 0
    for item in sample["sequence_plan"]:
        if item["type"] == "text":
            ids = next(texts)
            num_tokens += len(ids)
            what = tokenizer.decode(ids)
        else:
            tensor = next(images)
            expected_side = 32 if item["type"] == "vae_image" else 28
            assert tuple(tensor.shape) == (3, expected_side, expected_side), item
            num_tokens += 4
            what = _image_index(tensor)
        items.append((item["type"], item["enable_cfg"], item["loss"], what))
    assert next(images, None) is None and next(texts, None) is None
    assert sample["num_tokens"] == num_tokens
    return tuple(items)


def _spec_signature(start: int, end: int, merged: bool) -> tuple:
    """The plan SPEC section 4 (Edit) describes for a drawn (start, end, merged)."""
    items = [("vae_image", 1, 0, start), ("vit_image", 1, 0, start)]
    if merged:
        text = "".join(f"step{idx}" + ". " for idx in range(start + 1, end + 1)).rstrip()
        return tuple(items + [("text", 1, 0, text), ("vae_image", 0, 1, end)])
    for idx in range(start + 1, end + 1):
        items.append(("text", 1, 0, f"step{idx}"))
        if idx < end:
            items += [("vae_image", 0, 1, idx), ("vae_image", 1, 0, idx), ("vit_image", 1, 0, idx)]
        else:
            items.append(("vae_image", 0, 1, end))
    return tuple(items)


def _spec_distribution(n: int) -> dict[tuple, float]:
    probabilities: dict[tuple, float] = collections.defaultdict(float)
    for start in range(0, n - 1):  # uniform in [0, n-2]
        ends = range(start + 1, min(start + 2, n - 1) + 1)
        for end in ends:
            p = 1 / (n - 1) / len(ends)
            coins = [(True, 0.5), (False, 0.5)] if end - start > 1 else [(False, 1.0)]
            for merged, p_coin in coins:
                final_end = end - 1 if merged and end == n - 1 else end
                probabilities[_spec_signature(start, final_end, merged)] += p * p_coin
    return dict(probabilities)


def _within(count: int, total: int, p: float, sigmas: float = 5.5) -> bool:
    return abs(count - total * p) <= sigmas * math.sqrt(total * p * (1 - p)) + 1


@pytest.mark.parametrize("n, draws", [(2, 60), (3, 600), (4, 900)])
def test_step_choice_distribution_and_plans(tmp_path, tokenizer, n, draws):
    _, info = write_edit(tmp_path, [[[_chain(n)] * 30]])  # 30 identical rows, re-drawn every pass
    samples = itertools.islice(iter(_dataset(tmp_path, tokenizer, info)), draws)
    counts = collections.Counter(_signature(s, tokenizer) for s in samples)
    expected = _spec_distribution(n)
    assert set(counts) == set(expected), set(counts) ^ set(expected)
    for signature, p in expected.items():
        assert _within(counts[signature], draws, p), (signature, counts[signature], draws * p)


def test_spec_distribution_shapes_for_three_images():
    # The hand-derived table of SPEC section 4 for n = 3, as a check of the helper itself.
    table = {(len(sig), sig[-1][3], sig[2][3]): p for sig, p in _spec_distribution(3).items()}
    assert table == {
        (4, 1, "step1"): 0.25,  # start 0, end 1
        (4, 1, "step1."): 0.125,  # start 0, end 2, merged, end == n-1 so end -> 1
        (8, 2, "step1"): 0.125,  # start 0, end 2, two steps
        (4, 2, "step2"): 0.5,  # start 1, end 2
    }


def test_instruction_phrasing_drawn_uniformly(tmp_path, tokenizer):
    options = ["turn it red", "make it blue", "paint it green"]
    _, info = write_edit(tmp_path, [[[_chain(2, [options])] * 20]])
    samples = itertools.islice(iter(_dataset(tmp_path, tokenizer, info)), 600)
    counts = collections.Counter(tokenizer.decode(s["text_ids_list"][0]) for s in samples)
    assert set(counts) == set(options)
    assert all(_within(c, 600, 1 / 3) for c in counts.values()), counts


def test_merged_text_draws_one_phrasing_per_step(tmp_path, tokenizer):
    options = [["a1", "a2"], ["b1", "b2"], ["c1", "c2"]]
    _, info = write_edit(tmp_path, [[[_chain(4, options)] * 20]])
    merged = set()
    for sample in itertools.islice(iter(_dataset(tmp_path, tokenizer, info)), 400):
        if len(sample["sequence_plan"]) == 4 and sample["text_ids_list"][0]:
            text = tokenizer.decode(sample["text_ids_list"][0])
            if " " in text:  # the two-step merged text of start 0, end 2
                merged.add(text)
    assert merged == {f"{a}. {b}." for a in ("a1", "a2") for b in ("b1", "b2")}


# -- bad rows and configuration -----------------------------------------------------------
def test_bad_rows_skipped_with_named_reasons(tmp_path, tokenizer):
    rows = [
        _chain(2),
        {"image_list": IMAGES[:3], "instruction_list": [["only one step"]]},
        {"image_list": IMAGES[:1], "instruction_list": []},
        {"image_list": IMAGES[:2], "instruction_list": [["x"], ["y"]]},
        {"image_list": IMAGES[:2], "instruction_list": [[]]},
        {"image_list": [IMAGES[0], b"not an image"], "instruction_list": [["z"]]},
        _chain(3),
    ]
    _, info = write_edit(tmp_path, [[rows]])
    dataset = _dataset(tmp_path, tokenizer, info)
    samples = list(itertools.islice(iter(dataset), 3))  # rows 0 and 6, then row 0 again
    assert [s["data_indexes"]["data_indexes"] for s in samples] == [[0, 0], [0, 6], [0, 0]]
    assert dict(dataset.skip_log.counts) == {
        SkipReason.EDIT_LISTS_DISAGREE.value: 2,
        SkipReason.EDIT_TOO_FEW_IMAGES.value: 1,
        SkipReason.SCHEMA.value: 1,
        SkipReason.IMAGE_DECODE.value: 1,
    }


# Each is a schema problem in both modes; compat checks them in the reference's order.
MALFORMED_LISTS = [
    {"image_list": None, "instruction_list": [["x"]]},
    {"image_list": [IMAGES[0], None], "instruction_list": [["x"]]},
    {"image_list": IMAGES[:2], "instruction_list": None},
    {"image_list": IMAGES[:2], "instruction_list": [None]},
    {"image_list": IMAGES[:2], "instruction_list": [[]]},
    {"image_list": IMAGES[:2], "instruction_list": [["x", None]]},
]


@pytest.mark.parametrize("compat", [None, "bagel"])
def test_malformed_lists_are_skipped_as_schema_problems(tmp_path, tokenizer, compat):
    rows = [_chain(2), *MALFORMED_LISTS, {"image_list": IMAGES[:1], "instruction_list": [["x"]]}]
    _, info = write_edit(tmp_path, [[rows]])
    dataset = _dataset(tmp_path, tokenizer, info, compat=compat)
    log = dataset.new_skip_log()
    streamed = itertools.islice(dataset.iter_samples(log=log), 2)  # row 0, then row 0 of the next pass
    assert [cursor for cursor, _ in streamed] == [(0, 0, 0), (1, 0, 0)]
    assert dict(log.counts) == {SkipReason.SCHEMA.value: 6, SkipReason.EDIT_TOO_FEW_IMAGES.value: 1}


NO_INSTRUCTIONS = {"image_list": IMAGES[:2]}  # a row of a file without the instruction_list column


def test_a_file_missing_a_column_counts_every_row_of_its_row_groups_as_skipped(tmp_path, tokenizer):
    files = [[[_chain(2)]], [[NO_INSTRUCTIONS] * 3, [NO_INSTRUCTIONS] * 2]]
    _, info = write_edit(tmp_path, files, names=["a.parquet", "b.parquet"])
    dataset = _dataset(tmp_path, tokenizer, info, num_used=2)
    log = dataset.new_skip_log()
    assert len(list(dataset.iter_pass(log))) == 1
    assert dict(log.counts) == {SkipReason.SCHEMA.value: 5}


def test_a_row_group_gone_from_a_file_missing_a_column_counts_as_one_skipped_row(tmp_path, tokenizer):
    files = [[[_chain(2)]], [[NO_INSTRUCTIONS] * 3, [NO_INSTRUCTIONS] * 2]]
    _, info = write_edit(tmp_path, files, names=["a.parquet", "b.parquet"])
    dataset = _dataset(tmp_path, tokenizer, info, num_used=2)
    write_edit(tmp_path, [[[NO_INSTRUCTIONS] * 4]], names=["b.parquet"])  # rewritten: one row group now
    log = dataset.new_skip_log()
    assert len(list(dataset.iter_pass(log))) == 1
    assert dict(log.counts) == {SkipReason.SCHEMA.value: 4 + 1}


def test_strict_mode_names_the_row(tmp_path, tokenizer):
    rows = [_chain(2), _chain(2), {"image_list": IMAGES[:1], "instruction_list": []}]
    paths, info = write_edit(tmp_path, [[[_chain(3)], rows]])
    dataset = _dataset(tmp_path, tokenizer, info)
    dataset.strict = True
    iterator = iter(dataset)
    with pytest.raises(BadSampleError) as info_:
        for _ in range(4):  # at most 3 good rows come before the bad one
            next(iterator)
    assert info_.value.reason is SkipReason.EDIT_TOO_FEW_IMAGES
    assert info_.value.location == f"{paths[0]}, row group 1, row 2"


def test_file_missing_from_parquet_info_is_a_config_error(tmp_path, tokenizer):
    _paths, info = write_edit(tmp_path, [[[_chain(2)]], [[_chain(2)]]], names=["a.parquet", "b.parquet"])
    del info["b.parquet"]
    with pytest.raises(ConfigError, match="b.parquet"):
        _dataset(tmp_path, tokenizer, info, num_used=2)


@pytest.mark.parametrize("declared", [1, 4])
def test_stale_parquet_info_row_groups_is_a_config_error_naming_the_file(tmp_path, tokenizer, declared):
    _paths, info = write_edit(tmp_path, [[[_chain(2)], [_chain(2)]], [[_chain(2)]]], names=["a.parquet", "b.parquet"])
    info["a.parquet"]["num_row_groups"] = declared  # the file has 2
    with pytest.raises(ConfigError, match=rf"a.parquet: num_row_groups={declared}.*the file has 2 row groups"):
        _dataset(tmp_path, tokenizer, info, num_used=2)


@pytest.mark.parametrize("absolute_keys", [False, True], ids=["relative-keys", "full-path-keys"])
def test_parquet_info_keys(tmp_path, tokenizer, absolute_keys):
    files = [[[_chain(2)], [_chain(2)], [_chain(2)]], [[_chain(2)]]]
    paths, info = write_edit(tmp_path, files, names=["a.parquet", "b.parquet"], absolute_keys=absolute_keys)
    assert set(info) == ({*paths} if absolute_keys else {"a.parquet", "b.parquet"})
    dataset = _dataset(tmp_path, tokenizer, info, num_used=2)
    assert dataset.data_paths == [(paths[0], 0), (paths[0], 1), (paths[0], 2), (paths[1], 0)]
    assert sorted(dataset.epoch_units) == sorted(dataset.data_paths)
    assert len(list(itertools.islice(iter(dataset), 4))) == 4


def test_each_image_decoded_once_per_sample(tmp_path, tokenizer, monkeypatch):
    calls: list[bytes] = []
    real = media_module.decode_image

    def counting(data, *args, **kwargs):
        calls.append(bytes(data))
        return real(data, *args, **kwargs)

    monkeypatch.setattr(media_module, "decode_image", counting)
    _, info = write_edit(tmp_path, [[[_chain(4)] * 10]])
    iterator = iter(_dataset(tmp_path, tokenizer, info))
    max_used = 0
    for _ in range(120):
        before = len(calls)
        sample = next(iterator)
        used = {_image_index(t) for t in sample["image_tensor_list"]}
        new = calls[before:]
        assert len(new) == len(set(new)) == len(used)
        assert {IMAGES.index(data) for data in new} == used
        max_used = max(max_used, len(used))
    assert max_used == 3  # some samples use three images in six plan items


@pytest.mark.parametrize(
    "images", ["not a list", [IMAGES[0], "not bytes"], [IMAGES[0], None]], ids=["str", "str-item", "none-item"]
)
def test_a_row_whose_images_are_not_a_list_of_bytes_is_a_schema_problem(images):
    reason, _ = edit_module.check_edit_row(images, [["go"]])
    assert reason is SkipReason.SCHEMA


def test_sample_at_rebuilds_the_streamed_row(tmp_path, tokenizer):
    _, info = write_edit(tmp_path, [[[_chain(2), _chain(3), _chain(2)]]])
    dataset = _dataset(tmp_path, tokenizer, info)
    streamed = list(itertools.islice(dataset.iter_samples(), 3))
    for cursor, sample in streamed[1:]:
        again = dataset.sample_at(cursor)
        assert again is not None and again["text_ids_list"] == sample["text_ids_list"]


def test_parquet_info_is_found_by_path_by_relative_name_or_under_the_folder_it_moved_from(tmp_path):
    data_dir = str(tmp_path / "new")
    path = str(tmp_path / "new" / "a.parquet")
    entry = {"num_row_groups": 2}
    assert parquet_info.parquet_info_entry({path: entry}, path, data_dir) is entry
    assert parquet_info.parquet_info_entry({"a.parquet": entry}, path, data_dir) is entry
    assert parquet_info.parquet_info_entry({"/old/place/a.parquet": entry}, path, data_dir) is entry
    # Two old folders could both be it: no guess.
    assert parquet_info.parquet_info_entry({"/x/a.parquet": entry, "/y/a.parquet": entry}, path, data_dir) is None


def test_compat_leaves_a_file_without_parquet_info_out_counted_the_default_mode_refuses_it(tmp_path, tokenizer):
    paths, info = write_edit(tmp_path, [[[_chain(2)]], [[_chain(3)]]])
    del info[next(key for key in info if key.endswith(paths[1].rsplit("/", 1)[-1]))]
    compat = _dataset(tmp_path, tokenizer, info, num_used=2, compat="bagel")
    assert [unit[0] for unit in compat.data_paths] == [paths[0]]
    assert compat.skip_log.counts == {SkipReason.PARQUET_INFO_MISSING.value: 1}
    with pytest.raises(ConfigError, match="parquet_info"):
        _dataset(tmp_path, tokenizer, info, num_used=2)
