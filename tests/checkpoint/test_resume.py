"""Exact resume: a stream restored from a checkpoint continues as if it never stopped.

`check_save_load` runs one uninterrupted stream and a second one checkpointed after each cut
point's `cut` batches; each checkpoint is restored into a fresh dataset and loader, and the
batches after the cut must be identical, timesteps and dropout included.
"""

from __future__ import annotations

import collections
import itertools
import pickle
import random

import numpy as np
import pytest
import torch

from bagel_data import ConfigError, ResumeError, build_dataloader, make_bagel_multimodal_dataset
from bagel_data.checkpoint.state import BufferEntry
from bagel_data.families.unit_plan import UnitPlan
from bagel_data.packing.invariants import check_batch
from bagel_data.sample import sample_length
from helpers.batches import assert_same_batch
from helpers.three_groups import FRAMES, three_groups_config, three_groups_info

GROUPS = three_groups_config(
    t2i_pretrain={"is_mandatory": True},
    unified_edit={"is_mandatory": False},
    vlm_sft={"frame_sampler_args": FRAMES, "is_mandatory": False, "shuffle_lines": True},
)
PACKING = dict(
    expected_num_tokens=1490,
    max_num_tokens=1500,
    max_num_tokens_per_sample=900,
    prefer_buffer_before=600,
    max_buffer_size=4,
    text_cond_dropout_prob=0.3,
    vit_cond_dropout_prob=0.4,
    vae_cond_dropout_prob=0.3,
)


@pytest.fixture(scope="module")
def dataset_info(golden_root):
    return three_groups_info()


def make(dataset_info, tokenizer, special_tokens, num_workers: int, **overrides):
    packing = dict(PACKING, **overrides)
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=GROUPS,
        dataset_info=dataset_info,
        num_workers=max(num_workers, 1),
        data_seed=7,
        **packing,
    )


def check_save_load(build, num_workers: int, total: int, cuts: list[int]) -> list[dict]:
    """Compare restored streams with the uninterrupted one; return the checkpoints taken.

    One interrupted stream takes every cut's checkpoint as it goes (a trainer saves and
    carries on; a loader per cut would cost a start of its workers each): it must stay the
    uninterrupted stream, so taking a checkpoint changes nothing."""
    dataset = build()
    reference = list(itertools.islice(build_dataloader(dataset, num_workers=num_workers), total))
    for batch in reference:
        check_batch(batch.to_dict(), dataset.config, dataset.special_tokens)
    checkpoints = []
    loader = build_dataloader(build(), num_workers=num_workers)
    for i, batch in enumerate(itertools.islice(loader, max(cuts))):
        assert_same_batch(batch, reference[i], f"checkpointed stream, batch {i}")
        if i + 1 in cuts:
            checkpoints.append(pickle.loads(pickle.dumps(loader.state_dict())))  # as if written to disk
    del loader
    for cut, checkpoint in zip(sorted(cuts), checkpoints):
        restored = build_dataloader(build(), num_workers=num_workers)
        restored.load_state_dict(checkpoint)
        for i, batch in enumerate(itertools.islice(restored, total - cut)):
            assert_same_batch(batch, reference[cut + i], f"cut {cut}, batch {cut + i}")
    return checkpoints


def worker_states(checkpoint: dict) -> list[dict]:
    from bagel_data.checkpoint.collect import worker_dataset_states

    return worker_dataset_states(checkpoint)


@pytest.mark.parametrize("num_workers", [0, 1, 3])
@pytest.mark.parametrize("use_flex", [False, True])
def test_restore_gives_the_uninterrupted_stream(dataset_info, tokenizer, special_tokens, num_workers, use_flex):
    def build():
        return make(dataset_info, tokenizer, special_tokens, num_workers, use_flex=use_flex)

    cuts = [1, 4, 9]
    checkpoints = check_save_load(build, num_workers, total=12, cuts=cuts)
    states = [s for checkpoint in checkpoints for s in worker_states(checkpoint)]
    # The cut points cover a non-empty buffer and a group that wrapped around its units.
    assert any(state["stages"]["overflow"]["buffer"] for state in states), "no cut point had a buffered sample"
    assert any(c is not None and c[0] > 0 for s in states for c in s["stages"]["draw"]["cursors"].values()), (
        "no group wrapped"
    )


def test_checkpoint_is_small_and_holds_no_tensors(dataset_info, tokenizer, special_tokens):
    dataset = make(dataset_info, tokenizer, special_tokens, 0)
    stream = iter(dataset)
    for _ in range(6):
        next(stream)
    state = dataset.state_dict()
    assert state["stages"]["overflow"]["buffer"], "the configuration should leave samples in the buffer"
    assert len(pickle.dumps(state)) < 4096

    def no_tensors(value):
        if isinstance(value, dict):
            return all(no_tensors(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return all(no_tensors(v) for v in value)
        return not isinstance(value, (torch.Tensor, np.ndarray))

    assert no_tensors(state)


def test_topology_mismatch_is_a_clear_error(dataset_info, tokenizer, special_tokens):
    dataset = make(dataset_info, tokenizer, special_tokens, 0)
    next(iter(dataset))
    state = dataset.state_dict()
    state["topology"]["world_size"] = 4
    fresh = make(dataset_info, tokenizer, special_tokens, 0)
    fresh.load_state_dict(state)
    with pytest.raises(ResumeError, match="world_size=4"):
        next(iter(fresh))


def test_version_mismatch_is_a_clear_error(dataset_info, tokenizer, special_tokens):
    dataset = make(dataset_info, tokenizer, special_tokens, 0)
    state = dataset.state_dict()
    state["version"] = 99
    dataset.load_state_dict(state)
    with pytest.raises(ResumeError, match="version"):
        next(iter(dataset))


def test_no_global_rng_is_touched(dataset_info, tokenizer, special_tokens):
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone())
    dataset = make(dataset_info, tokenizer, special_tokens, 0)
    list(itertools.islice(iter(dataset), 5))
    assert random.getstate() == before[0]
    assert np.array_equal(np.random.get_state()[1], before[1])
    assert torch.equal(torch.get_rng_state(), before[2])


def test_global_rng_does_not_change_the_stream(dataset_info, tokenizer, special_tokens):
    def first_timesteps():
        dataset = make(dataset_info, tokenizer, special_tokens, 0)
        return [b["packed_timesteps"] for b in itertools.islice(iter(dataset), 3)]

    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    first = first_timesteps()
    random.seed(2), np.random.seed(2), torch.manual_seed(2)
    second = first_timesteps()
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_data_status_fallback_restarts_after_the_given_positions(dataset_info, tokenizer, special_tokens):
    """The reference's path: positions from batch_data_indexes resume each group."""
    dataset = make(dataset_info, tokenizer, special_tokens, 0)
    batch = next(iter(dataset))
    last = {}
    for where in batch["batch_data_indexes"]:
        last[where["dataset_name"]] = where["data_indexes"]
    status = {group: [position] for group, position in last.items()}
    resumed = make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=GROUPS,
        dataset_info=dataset_info,
        num_workers=1,
        data_seed=7,
        data_status=status,
        **PACKING,
    )
    fresh = make(dataset_info, tokenizer, special_tokens, 0)
    for group, family, uninterrupted in zip(resumed.group_names, resumed.grouped_datasets, fresh.grouped_datasets):
        if group in last:
            _, first = next(family.iter_samples(after=family.resume_cursor(0)))
            # The uninterrupted stream's sample right after the recorded position.
            positions = (s["data_indexes"]["data_indexes"] for _, s in uninterrupted.iter_samples())
            for position in positions:
                if position == last[group]:
                    break
            expected = next(positions)
            assert first["data_indexes"]["data_indexes"] == expected, (
                f"{group} did not restart right after {last[group]}"
            )


PACKING_SKIPS = ("over_max_num_tokens_per_sample", "no_room_beside_mandatory_samples")


def test_conservation_every_drawn_sample_is_packed_once_or_buffered(dataset_info, tokenizer, special_tokens):
    """Over a long run nothing is lost: drawn = packed + buffered + counted over-budget skips."""
    dataset = make(dataset_info, tokenizer, special_tokens, 0, max_num_tokens_per_sample=300)
    stream = iter(dataset)
    packed = collections.defaultdict(collections.Counter)
    for batch in itertools.islice(stream, 30):
        for where in batch["batch_data_indexes"]:
            # The default mode's walk by rows names a sample [round, draw, fingerprint].
            packed[where["dataset_name"]][repr(where["data_indexes"][:2])] += 1
    state = dataset.state_dict()
    buffered = collections.defaultdict(collections.Counter)
    for entry in (
        BufferEntry.read(raw)
        for raw in state["stages"]["overflow"]["buffer"]
        + ([state["stages"]["overflow"]["carry"]] if state["stages"]["overflow"]["carry"] else [])
    ):
        buffered[entry.group][repr(list(entry.cursor))] += 1
    lengths, total_lost = collections.defaultdict(dict), 0
    t2i = dataset.grouped_datasets[dataset.group_names.index("t2i_pretrain")]
    shortest_mandatory = min(sample_length(s) for _, s in itertools.islice(t2i.iter_samples(), 12))
    for group, family in zip(dataset.group_names, dataset.grouped_datasets):
        drawn = collections.Counter()
        final = state["stages"]["draw"]["cursors"][group]
        if final is None:
            continue
        for cursor, sample in family.iter_samples():
            drawn[repr(list(cursor))] += 1
            lengths[group][repr(list(cursor))] = sample
            if list(cursor) == final:
                break
        accounted = packed[group] + buffered[group]
        assert not (accounted - drawn), f"{group}: packed something never drawn"
        # Whatever was drawn and is neither packed nor waiting must be a sample that cannot
        # fit: longer than the per-sample budget, or (carried) too long beside the mandatory
        # T2I sample that opens every pack. Lengths are measured here, not taken from counters.
        lost = drawn - accounted
        total_lost += sum(lost.values())
        for position in lost:
            length = sample_length(lengths[group][position])
            assert length > 300 or length + shortest_mandatory > PACKING["max_num_tokens"], (group, position, length)
        over_budget = sum(state["skips"][group].get(reason, 0) for reason in PACKING_SKIPS)
        assert sum(lost.values()) == over_budget, f"{group}: the counted packing skips are the lost samples"
    assert total_lost > 0, "the 300-token budget must make some samples unusable"
    assert any(state["skips"][g] for g in state["skips"]), "bad golden rows should be counted"


def test_too_few_units_for_the_workers_is_a_construction_error(dataset_info, tokenizer, special_tokens, monkeypatch):
    """Where whole units are walked (tars, a user's family, compat); the default walk by rows
    feeds any worker count (tests/test_row_walk.py)."""
    make(dataset_info, tokenizer, special_tokens, 5)
    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)
    with pytest.raises(ConfigError, match="at least"):
        make(dataset_info, tokenizer, special_tokens, 5)


def test_checkpoint_of_other_data_is_a_clear_error(dataset_info, tokenizer, special_tokens):
    dataset = make(dataset_info, tokenizer, special_tokens, 0)
    next(iter(dataset))
    state = dataset.state_dict()
    fewer = make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=dict(GROUPS, vlm_sft=dict(GROUPS["vlm_sft"], num_used_data=[5])),
        dataset_info=dataset_info,
        num_workers=1,
        data_seed=7,
        **PACKING,
    )
    fewer.load_state_dict(state)
    with pytest.raises(ResumeError, match="vlm_sft: the checkpoint was taken with .* units, the dataset now has"):
        next(iter(fewer))
