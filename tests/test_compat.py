"""compat="bagel": the switches of docs/compat.md, the clear errors it keeps, its one policy object, and its random
draws pinned to the reference's order (expected draws computed here, by hand, from a
`random.Random` / `numpy.random.RandomState` seeded as the reference's globals)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from bagel_data import ConfigError, make_bagel_multimodal_dataset
from bagel_data.compat import CompatPolicy, CompatRandom
from bagel_data.errors import SkipReason
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.families.vlm import SftJSONLIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.media.video import frame_indices
from bagel_data.sharding import reference_shard_unit_ids
from bagel_data.tools.run import RunConfig
from helpers.builders import png_bytes, write_vlm
from helpers.golden import absolute_dataset_info, load_case

T2I_GROUP = {
    "dataset_names": ["t2i"],
    "image_transform_args": {"image_stride": 16, "max_image_size": 128, "min_image_size": 64},
    "is_mandatory": False,
    "num_used_data": [3],
    "weight": 1,
}


@pytest.fixture(scope="module")
def dataset_info(golden_root):
    case, _, _ = load_case("packed_three_groups_flex")
    return absolute_dataset_info(case)


def build(dataset_info, tokenizer, special_tokens, **kwargs):
    args = dict(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets={"t2i_pretrain": T2I_GROUP},
        dataset_info=dataset_info,
        num_workers=1,
        data_seed=42,
        expected_num_tokens=300,
        max_num_tokens=4000,
        max_num_tokens_per_sample=1000,
        prefer_buffer_before=100,
        compat="bagel",
    )
    args.update(kwargs)
    return make_bagel_multimodal_dataset(**args)


# -- the value and the constructors ----------------------------------------------------------
@pytest.mark.parametrize("value", ["Bagel", "nemo", True, 1])
def test_unknown_compat_is_a_config_error(dataset_info, tokenizer, special_tokens, value):
    with pytest.raises(ConfigError) as info:
        build(dataset_info, tokenizer, special_tokens, compat=value)
    assert info.value.key == "compat" and info.value.value == value and "bagel" in str(info.value)
    with pytest.raises(ConfigError):
        T2IIterableDataset("t", ImageTransform(64, 32, 16), tokenizer, [], [], compat=value)
    with pytest.raises(ConfigError):
        RunConfig({}, {}, {}, value)


def test_compat_is_stored_everywhere(dataset_info, tokenizer, special_tokens):
    packed = build(dataset_info, tokenizer, special_tokens)
    assert packed.compat == "bagel"
    assert all(dataset.compat == "bagel" for dataset in packed.grouped_datasets)
    assert all(dataset.file_order == "filesystem" for dataset in packed.grouped_datasets)
    default = build(dataset_info, tokenizer, special_tokens, compat=None)
    assert default.compat is None and default.grouped_datasets[0].file_order == "sorted"


def test_compat_with_sorted_listing_is_a_config_error(dataset_info, tokenizer, special_tokens):
    group = dict(T2I_GROUP, file_order="sorted")
    with pytest.raises(ConfigError, match="file_order"):
        build(dataset_info, tokenizer, special_tokens, grouped_datasets={"t2i_pretrain": group})


# -- sharding ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("units", "world", "rank", "workers", "worker", "expected"),
    [
        (11, 2, 1, 2, 1, [8, 7]),  # rank 1: 5..9, worker 1: 7..8, reversed; 9 and 10 unused
        (11, 2, 0, 2, 0, [1, 0]),
        (9, 2, 1, 0, 0, [4, 5, 6, 7]),  # main process: the rank slice in order; 8 unused
        (7, 1, 0, 3, 2, [5, 4]),  # 6 unused
    ],
)
def test_reference_shards_drop_remainders(units, world, rank, workers, worker, expected):
    assert reference_shard_unit_ids(units, rank, world, worker, workers).tolist() == expected


def test_empty_worker_shard_is_a_config_error_not_a_hang(dataset_info, tokenizer, special_tokens):
    # 3 files over 2 ranks x 2 workers: the reference gives a worker nothing and loops forever.
    with pytest.raises(ConfigError, match="num_used_data"):
        build(dataset_info, tokenizer, special_tokens, world_size=2, local_rank=1, num_workers=2)


# -- randomness ---------------------------------------------------------------------------
def _captions(dataset, position) -> list:
    """The captions cell of the row at a T2I position, read straight from the file."""
    file_index, row_group, row = position
    path = dataset.data_paths_per_rank[file_index]
    import json

    cell = pq.ParquetFile(path).read_row_group(row_group, ["captions"]).column("captions")[row].as_py()
    return list(json.loads(cell).values())


@pytest.mark.parametrize("seed", [3, 42])
def test_t2i_pack_draws_follow_the_reference_order(dataset_info, tokenizer, special_tokens, seed):
    """Reference order per fresh sample: group `random()`, `random.choice(captions)` (when
    there are captions), the text CFG `random()`, then `np.random.randn()` for the target."""
    packed = build(dataset_info, tokenizer, special_tokens, text_cond_dropout_prob=0.5, compat_seed=seed)
    batches = list(itertools.islice(iter(packed), 4))
    py, npr = random.Random(seed), np.random.RandomState(seed)
    dropped_seen = kept_seen = 0
    for batch in batches:
        shapes = batch["patchified_vae_latent_shapes"]
        timesteps = batch["packed_timesteps"]
        start = 0
        for index, where in enumerate(batch["batch_data_indexes"]):
            py.random()  # the group choice
            captions = _captions(packed.grouped_datasets[0], where["data_indexes"])
            if captions:
                py.choice(captions)
            dropped = py.random() < 0.5
            expected_timestep = np.float32(npr.randn())
            h, w = shapes[index]
            assert (batch["sample_lens"][index] == h * w + 2) == dropped, (index, where)
            assert timesteps[start].item() == expected_timestep
            start += h * w
            dropped_seen += dropped
            kept_seen += not dropped
    assert dropped_seen and kept_seen, "the seed should both drop and keep some captions"


def test_compat_stream_leaves_global_rngs_untouched(dataset_info, tokenizer, special_tokens):
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone())
    packed = build(dataset_info, tokenizer, special_tokens, text_cond_dropout_prob=0.5)
    list(itertools.islice(iter(packed), 3))
    assert random.getstate() == before[0]
    assert np.array_equal(np.random.get_state()[1], before[1])
    assert torch.equal(torch.get_rng_state(), before[2])


@pytest.mark.parametrize(("num_frames", "vlen"), [(3, 10), (4, 4), (6, 7), (2, 9)])
def test_frame_picks_follow_the_reference(num_frames, vlen):
    """One `random.choice(range(a, b))` per segment; at an empty segment, the draws made so
    far stay spent and a sorted `np.random.permutation(vlen)[:n]` is used."""
    rng = CompatRandom(11, 11)
    got = frame_indices(num_frames, vlen, "rand", rng)
    py, npr = random.Random(11), np.random.RandomState(11)
    n = min(num_frames, vlen)
    bounds = np.linspace(0, vlen, n + 1).astype(int)
    expected = []
    for a, b in zip(bounds[:-1], bounds[1:] - 1):
        if not range(a, b):
            expected = sorted(npr.permutation(vlen)[:n].tolist())
            break
        expected.append(py.choice(range(a, b)))
    expected += [expected[-1]] * (num_frames - n)
    assert got == expected
    assert rng.py.getstate() == py.getstate()


class _Probe(torch.utils.data.IterableDataset):
    """Yields, inside each worker, our generators' draws next to the worker's globals'."""

    def __iter__(self):
        ours = CompatRandom.for_context(compat_seed=0)
        yield {
            "ours": [ours.random(), ours.standard_normal(), ours.integers(1000)],
            # Test code may read the globals torch seeded; the library never does.
            "torch": [random.random(), float(np.random.randn()), random.choice(range(1000))],
        }


def test_worker_generators_are_seeded_as_torch_seeds_the_globals():
    generator = torch.Generator().manual_seed(1234)
    loader = torch.utils.data.DataLoader(_Probe(), batch_size=None, num_workers=2, generator=generator)
    results = list(loader)
    assert len(results) == 2
    for result in results:
        assert result["ours"] == result["torch"]
    assert results[0]["ours"] != results[1]["ours"]


def test_main_process_generators_come_from_compat_seed():
    rng = CompatRandom.for_context(compat_seed=9)
    assert rng.random() == random.Random(9).random()
    assert rng.standard_normal() == np.random.RandomState(9).randn()


# -- packing: the emit-time drop ----------------------------------------------------------------
def test_emit_time_drop_is_counted(dataset_info, tokenizer, special_tokens):
    """With no buffer, every sample that overflows a pack goes; compat counts each one."""
    tight = dict(expected_num_tokens=190, max_num_tokens=200, max_num_tokens_per_sample=150, max_buffer_size=0)
    packed = build(dataset_info, tokenizer, special_tokens, **tight)
    batches = list(itertools.islice(iter(packed), 6))
    dropped = packed.stats["skips"]["t2i_pretrain"].get(SkipReason.DROPPED_AT_EMIT.value, 0)
    assert dropped > 0
    default = build(dataset_info, tokenizer, special_tokens, compat=None, **tight)
    list(itertools.islice(iter(default), 6))
    assert SkipReason.DROPPED_AT_EMIT.value not in default.stats["skips"]["t2i_pretrain"]
    assert len(batches) == 6


# -- VLM rows --------------------------------------------------------------------------------
def _vlm(tmp_path, tokenizer, rows, compat):
    images = {"a.png": png_bytes(40, 30), "b.png": png_bytes(30, 40, (10, 200, 10))}
    jsonl, image_dir = write_vlm(tmp_path, rows, images)
    transform = ImageTransform(56, 28, 14)
    return SftJSONLIterableDataset(
        "vlm", transform, tokenizer, None, [jsonl], [image_dir], [100], num_workers=1, compat=compat
    )


def _turns(*values):
    roles = ["human", "gpt"] * len(values)
    return [{"from": role, "value": value} for role, value in zip(roles, values)]


def test_compat_vlm_takes_mismatched_rows_as_the_reference(tmp_path, tokenizer):
    surplus = {"image": ["a.png", "b.png"], "conversations": _turns("<image> What?", "A square.")}
    compat = _vlm(tmp_path, tokenizer, [surplus], "bagel")
    sample = next(iter(compat))
    assert [item["type"] for item in sample["sequence_plan"]] == ["vit_image", "text", "text"]
    assert len(sample["image_tensor_list"]) == 2  # the surplus image rides along, unused
    per_image = [t.shape[1] * t.shape[2] // 14**2 for t in sample["image_tensor_list"]]
    assert sample["num_tokens"] == sum(per_image) + sum(len(ids) for ids in sample["text_ids_list"])
    good = {"conversations": _turns("Hi?", "Hello.")}
    default = _vlm(tmp_path / "d", tokenizer, [surplus, good], None)
    samples = [sample for _, sample in itertools.islice(default.iter_samples(), 2)]
    assert all(not sample["image_tensor_list"] for sample in samples)
    assert default.skip_log.counts[SkipReason.PLACEHOLDER_MISMATCH.value] >= 1


def test_compat_vlm_row_needing_more_images_than_it_has_is_a_named_skip(tmp_path, tokenizer):
    # Each turn's tag passes the reference's per-turn gate: two image items, one image.
    row = {"image": "a.png", "conversations": _turns("<image> One?", "Yes.", "<image> Two?", "No.")}
    good = {"conversations": _turns("Hi?", "Hello.")}
    dataset = _vlm(tmp_path, tokenizer, [row, good], "bagel")
    samples = [sample for _, sample in itertools.islice(dataset.iter_samples(), 3)]
    assert all(item["type"] == "text" for sample in samples for item in sample["sequence_plan"])
    assert dataset.skip_log.counts[SkipReason.IMAGE_ITEMS_EXCEED_IMAGES.value] >= 1


# -- the policy: what compat decides, asked in one place -------------------------------------
def test_the_policy_answers_each_switch_for_both_modes():
    default, bagel = CompatPolicy(), CompatPolicy("bagel")
    assert (default.reference, bagel.reference) == (False, True)
    assert (default.drops_sample_at_emit, bagel.drops_sample_at_emit) == (False, True)
    assert (default.takes_rows_as_they_are, bagel.takes_rows_as_they_are) == (False, True)
    # 7 units over 2 ranks: the default mode reads the remainder, the reference drops it.
    assert [list(default.rank_unit_ids(7, 2, rank)) for rank in (0, 1)] == [[0, 1, 2, 3], [4, 5, 6]]
    assert [list(bagel.rank_unit_ids(7, 2, rank)) for rank in (0, 1)] == [[0, 1, 2], [3, 4, 5]]


def test_the_policy_decides_the_file_order_and_refuses_a_contradiction():
    assert CompatPolicy().file_order(None) == "sorted"
    assert CompatPolicy().file_order("sorted") == "sorted"  # an explicit order is kept
    assert CompatPolicy().file_order("filesystem") == "filesystem"
    assert CompatPolicy("bagel").file_order(None) == "filesystem"
    with pytest.raises(ConfigError, match="file_order"):
        CompatPolicy("bagel").file_order("sorted")


def test_policies_of_the_same_settings_are_equal_and_a_bad_mode_is_refused():
    """Equality is the decision (mode, seed), not the stream object each one carries."""
    assert CompatPolicy("bagel", seed=3) == CompatPolicy("bagel", seed=3)
    assert CompatPolicy("bagel", seed=3) != CompatPolicy("bagel", seed=4)
    assert CompatPolicy.of(None) == CompatPolicy()
    policy = CompatPolicy("bagel")
    assert CompatPolicy.of(policy) is policy  # handed down, not copied
    with pytest.raises(ConfigError, match="compat"):
        CompatPolicy("BAGEL")


def test_the_stream_starts_from_compat_seed_else_the_data_seed_and_replays_a_row():
    seeded, unseeded = CompatPolicy("bagel", seed=9), CompatPolicy("bagel")
    assert seeded.start_stream(data_seed=1).random() == random.Random(9).random()
    assert unseeded.start_stream(data_seed=1).random() == random.Random(1).random()
    live = seeded.stream.live()
    state = live.get_state()
    first = live.random()
    with seeded.stream.replaying(state) as replay:
        assert replay.random() == first and replay is not live
    assert seeded.stream.live() is live  # the live stream is back, where it was
