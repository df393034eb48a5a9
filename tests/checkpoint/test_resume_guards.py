"""What a checkpoint must refuse, and what must carry over when it is accepted.

Each test states a user-visible outcome: a checkpoint loaded by another worker of the same
world size is refused (that worker would silently read another's share), counters and skip
counts continue instead of restarting at zero, two workers never draw the same noise, and the
reference's `data_status` works whatever sequence type holds a position.
"""

from __future__ import annotations

import itertools
import pickle

import pytest
import torch

from bagel_data import ResumeError, make_bagel_multimodal_dataset
from helpers.builders import solid_jpeg, write_t2i
from helpers.golden import as_worker

CAPTION = {"only": "a red square on a plain background"}


def _t2i_folder(tmp_path, files: int = 4, rows: int = 3):
    """`files` parquet files of identical rows: every sample has the same plan and size,
    so any difference between two streams' timesteps comes from their random draws."""
    row = {"image": solid_jpeg(64, 64, (200, 30, 30)), "captions": CAPTION}
    write_t2i(tmp_path / "t2i", [[[row] * rows]] * files)
    return str(tmp_path / "t2i")


def _build(folder, tokenizer, special_tokens, *, rank=0, world_size=1, num_workers=1, num_used=8, **kw):
    groups = {
        "t2i_pretrain": {
            "dataset_names": ["t2i"],
            "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32},
            "is_mandatory": False,
            "num_used_data": [num_used],
            "weight": 1,
        }
    }
    packing = dict(
        expected_num_tokens=60,
        max_num_tokens=100,
        max_num_tokens_per_sample=90,
        prefer_buffer_before=10,
        max_buffer_size=2,
    )
    packing.update(kw)
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=groups,
        dataset_info={"t2i_pretrain": {"t2i": {"data_dir": folder}}},
        local_rank=rank,
        world_size=world_size,
        num_workers=num_workers,
        data_seed=3,
        **packing,
    )


def _checkpoint_after_one_batch(dataset, worker_id, num_workers) -> dict:
    with as_worker(worker_id, num_workers):
        iterator = iter(dataset)
        next(iterator)
        return pickle.loads(pickle.dumps(dataset.state_dict()))


@pytest.mark.parametrize(
    "saved_by, loaded_by",
    [
        ((0, 2, 0, 2), (1, 2, 0, 2)),  # another rank, same world size
        ((0, 2, 0, 2), (0, 2, 1, 2)),  # another worker of the same rank
        ((0, 2, 0, 2), (0, 2, 0, 1)),  # another worker count
        ((0, 1, 0, 2), (0, 1, 0, 4)),
    ],
    ids=["rank", "worker-id", "worker-count", "more-workers"],
)
def test_a_checkpoint_is_refused_by_any_other_worker(tmp_path, tokenizer, special_tokens, saved_by, loaded_by):
    folder = _t2i_folder(tmp_path)
    rank, world, worker, workers = saved_by
    saved = _checkpoint_after_one_batch(
        _build(folder, tokenizer, special_tokens, rank=rank, world_size=world, num_workers=workers), worker, workers
    )
    rank, world, worker, workers = loaded_by
    other = _build(folder, tokenizer, special_tokens, rank=rank, world_size=world, num_workers=workers)
    other.load_state_dict(saved)
    with as_worker(worker, workers), pytest.raises(ResumeError, match="elastic"):
        next(iter(other))


@pytest.mark.parametrize("num_used_now", [7, 9], ids=["fewer-units", "more-units"])
def test_a_checkpoint_is_refused_on_data_with_another_unit_count(tmp_path, tokenizer, special_tokens, num_used_now):
    folder = _t2i_folder(tmp_path)
    saved = _checkpoint_after_one_batch(_build(folder, tokenizer, special_tokens, num_used=8), None, 1)
    other = _build(folder, tokenizer, special_tokens, num_used=num_used_now)
    other.load_state_dict(saved)
    with pytest.raises(ResumeError, match="units"):
        next(iter(other))


def test_counters_and_skip_counts_continue_after_a_resume(tmp_path, tokenizer, special_tokens):
    """`stats` after resuming equals `stats` of a run that never stopped (a corrupt row per
    file keeps the skip counter busy)."""
    good = {"image": solid_jpeg(64, 64, (200, 30, 30)), "captions": CAPTION}
    bad = {"image": b"not an image", "captions": CAPTION}
    write_t2i(tmp_path / "t2i", [[[good, bad, good]]] * 4)
    folder = str(tmp_path / "t2i")
    total, cut = 6, 2
    whole = _build(folder, tokenizer, special_tokens)
    list(itertools.islice(iter(whole), total))
    first = _build(folder, tokenizer, special_tokens)
    list(itertools.islice(iter(first), cut))
    second = _build(folder, tokenizer, special_tokens)
    second.load_state_dict(pickle.loads(pickle.dumps(first.state_dict())))
    list(itertools.islice(iter(second), total - cut))
    assert whole.stats["packs"] == total
    assert whole.stats["skips"]["t2i_pretrain"], "the corrupt rows must be counted"
    for key in ("packs", "tokens", "samples", "skips"):
        assert second.stats[key] == whole.stats[key], key


def _first_timesteps(dataset, worker_id, num_workers) -> torch.Tensor:
    with as_worker(worker_id, num_workers):
        return next(iter(dataset))["packed_timesteps"]


def test_two_workers_of_a_rank_draw_different_noise(tmp_path, tokenizer, special_tokens):
    folder = _t2i_folder(tmp_path)
    dataset = _build(folder, tokenizer, special_tokens, num_workers=2)
    a = _first_timesteps(dataset, 0, 2)
    b = _first_timesteps(_build(folder, tokenizer, special_tokens, num_workers=2), 1, 2)
    assert a.shape == b.shape, "identical rows give identical pack layouts"
    assert not torch.equal(a, b), "two workers drew the same timesteps"


def test_two_ranks_draw_different_noise(tmp_path, tokenizer, special_tokens):
    folder = _t2i_folder(tmp_path)
    a = _first_timesteps(_build(folder, tokenizer, special_tokens, rank=0, world_size=2), 0, 1)
    b = _first_timesteps(_build(folder, tokenizer, special_tokens, rank=1, world_size=2), 0, 1)
    assert a.shape == b.shape
    assert not torch.equal(a, b), "two ranks drew the same timesteps"


def test_an_elastic_restart_does_not_replay_the_old_draws(tmp_path, tokenizer, special_tokens):
    """After an elastic restart the new workers draw afresh: starting the generator of the
    old run again would give the restarted stream the very noise the old run began with."""
    folder = _t2i_folder(tmp_path)
    old_first = _first_timesteps(_build(folder, tokenizer, special_tokens, num_workers=2), 0, 2)
    saved = [
        _checkpoint_after_one_batch(_build(folder, tokenizer, special_tokens, num_workers=2), w, 2) for w in (0, 1)
    ]
    restarted = _build(folder, tokenizer, special_tokens, num_workers=2)
    restarted.load_elastic_state(saved)
    new_first = _first_timesteps(restarted, 0, 2)
    assert new_first.shape == old_first.shape, "identical rows give identical pack layouts"
    assert not torch.equal(new_first, old_first), "the restart replayed the old run's draws"


@pytest.mark.parametrize("container", [list, tuple], ids=["list", "tuple"])
def test_data_status_positions_may_be_lists_or_tuples(tmp_path, tokenizer, special_tokens, container):
    """The reference's `data_status` restarts just after the recorded T2I position
    `[file, row group, row]`, whether a JSON round trip made it a list or code a tuple."""
    folder = _t2i_folder(tmp_path)
    plain = _build(folder, tokenizer, special_tokens)
    with as_worker(0, 1):
        positions = [d["data_indexes"] for d in next(iter(plain))["batch_data_indexes"]]
    recorded = positions[1]
    resumed = _build(folder, tokenizer, special_tokens, data_status={"t2i_pretrain": [container(recorded)]})
    with as_worker(0, 1):
        after = [d["data_indexes"] for d in next(iter(resumed))["batch_data_indexes"]]
    assert after[0] == positions[2], (recorded, after)


def test_a_group_with_no_saved_positions_stays_none_in_data_status():
    from bagel_data.checkpoint.checks import check_data_status

    assert check_data_status({"t2i": None, "vlm": {"0": [1, 2]}}, ["t2i", "vlm"])["t2i"] is None
