"""A checkpoint written by NeMo AutoModel's `PackedDataset.state_dict()` (format version 1)
loads: each group continues after this worker's position and the buffered samples are
re-read; anything else is a ResumeError that says how to continue (the data_status path)."""

from __future__ import annotations

import collections
import itertools
import random

import numpy as np
import pytest
import torch

from bagel_data import DataConfig, PackedDataset, ResumeError
from bagel_data.packing.invariants import check_batch
from bagel_data.sources import storage
from helpers.golden import absolute_dataset_info, load_case

BUDGETS = dict(expected_num_tokens=300, max_num_tokens_per_sample=400, max_num_tokens=900, prefer_buffer_before=300)
CUT = 3


# A NeMo AutoModel checkpoint holds reference positions: items of the walk by whole units. The
# default walk by rows refuses them with a ResumeError naming compat="bagel".
pytestmark = pytest.mark.walk_by_units


@pytest.fixture(scope="module")
def case():
    case, _, _ = load_case("packed_three_groups_flex")
    grouped = {name: dict(args) for name, args in case["grouped_datasets"].items()}
    for name, args in grouped.items():
        args["weight"], args["is_mandatory"] = 1, name == "t2i_pretrain"
        # 6 of the 3 files: each twice, the files the reference takes too, so that NeMo's positions are ours
        args["num_used_data"] = [6] if name == "t2i_pretrain" else args["num_used_data"]
    return grouped, absolute_dataset_info(case)


def _dataset(case, tokenizer, special_tokens) -> PackedDataset:
    grouped, info = case
    dataset = PackedDataset(DataConfig(grouped), tokenizer, special_tokens, 0, 1, 0, dataset_info=info, **BUDGETS)
    dataset.set_epoch(42)
    return dataset


def _by_group(batches) -> dict:
    found = collections.defaultdict(list)
    for batch in batches:
        for item in batch["batch_data_indexes"]:
            found[item["dataset_name"]].append(item["data_indexes"])
    return found


def _nemo_state(group_names, batches, buffered=()) -> dict:
    """What NeMo's state_dict() holds in worker 0 after `batches` (its layout, our positions)."""
    last = {}
    for batch in batches:
        for item in batch["batch_data_indexes"]:
            last[item["dataset_name"]] = item["data_indexes"]
    return {
        "version": 1,
        "yielded_batches": len(batches),
        "buffer": [{"num_tokens": 1, "data_indexes": dict(where)} for where in buffered],
        "sequence_status": {"curr": 0, "sample_lens": []},
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
        "grouped_dataset_states": [{"data_status": [last.get(name)]} for name in group_names],
    }


def test_nemo_checkpoint_continues_after_its_positions(case, tokenizer, special_tokens):
    full = list(itertools.islice(_dataset(case, tokenizer, special_tokens), CUT + 8))
    dataset = _dataset(case, tokenizer, special_tokens)
    dataset.load_state_dict(_nemo_state(dataset.group_names, full[:CUT]))
    after = list(itertools.islice(dataset, 4))
    for batch in after:
        check_batch(batch, dataset.config, dataset.special_tokens)
    done, uninterrupted, resumed = _by_group(full[:CUT]), _by_group(full), _by_group(after)
    assert resumed
    for group, seen in resumed.items():
        start = len(done.get(group, []))
        assert seen == uninterrupted[group][start : start + len(seen)], group
    assert dataset.stats["packs"] == CUT + 4  # yielded_batches carried over


def test_nemo_buffer_is_re_read_and_packed_first(case, tokenizer, special_tokens):
    full = list(itertools.islice(_dataset(case, tokenizer, special_tokens), CUT + 8))
    vlm = [item for batch in full[CUT:] for item in batch["batch_data_indexes"] if item["dataset_name"] == "vlm_sft"]
    waiting = vlm[0]  # a sample NeMo had drawn and held back when it saved
    dataset = _dataset(case, tokenizer, special_tokens)
    state = _nemo_state(dataset.group_names, full[:CUT], buffered=[waiting])
    # NeMo records a group's position when the sample is drawn: the buffered one is behind it.
    state["grouped_dataset_states"][dataset.group_names.index("vlm_sft")]["data_status"] = [waiting["data_indexes"]]
    dataset.load_state_dict(state)
    after = list(itertools.islice(dataset, 6))
    # The mandatory sample opens the pack, then the buffer drains before any new draw.
    assert after[0]["batch_data_indexes"][0]["dataset_name"] == "t2i_pretrain"
    assert after[0]["batch_data_indexes"][1] == waiting
    read = [item for batch in after for item in batch["batch_data_indexes"] if item["dataset_name"] == "vlm_sft"]
    assert read[0] == waiting and len(read) > 1
    assert read[1:] == vlm[1 : len(read)]  # then the group continues after it, never repeating it


def test_nemo_checkpoint_of_other_groups_or_workers_says_how_to_continue(case, tokenizer, special_tokens):
    dataset = _dataset(case, tokenizer, special_tokens)
    state = _nemo_state(dataset.group_names, [])
    state["grouped_dataset_states"].pop()
    dataset.load_state_dict(state)
    with pytest.raises(ResumeError, match="data_status=") as info:
        next(iter(dataset))
    assert "2 groups" in str(info.value)
    state = _nemo_state(dataset.group_names, [])
    state["grouped_dataset_states"][0]["data_status"] = [None, [0, 0, 1]]  # worker 1's, loaded into worker 0
    dataset.load_state_dict(state)
    with pytest.raises(ResumeError, match="worker"):
        next(iter(dataset))


def test_unknown_checkpoint_format_says_how_to_continue(case, tokenizer, special_tokens):
    dataset = _dataset(case, tokenizer, special_tokens)
    dataset.load_state_dict({"version": 7, "cursors": {}})
    with pytest.raises(ResumeError, match="data_status=") as info:
        next(iter(dataset))
    assert "version 7" in str(info.value)


def test_nemo_positions_on_files_the_default_mode_repeats_otherwise_say_compat(
    case, tokenizer, special_tokens, monkeypatch
):
    """NeMo lists a folder in the filesystem's order; here the reverse of the sorted one, so
    that 4 of the 3 T2I files repeat another file in NeMo (and compat="bagel") than in the
    default mode. Its positions then name other rows here: a ResumeError that says to resume
    with compat="bagel", which continues at NeMo's next rows."""
    listed = storage.list_entries
    monkeypatch.setattr(storage, "list_entries", lambda path, sort=True: listed(path, True)[:: 1 if sort else -1])
    grouped, info = case
    grouped = {name: dict(args, num_used_data=[4] if name == "t2i_pretrain" else args["num_used_data"])
               for name, args in grouped.items()}  # fmt: skip

    def build(compat):
        dataset = PackedDataset(
            DataConfig(grouped), tokenizer, special_tokens, 0, 1, 0, dataset_info=info, compat=compat, **BUDGETS
        )
        dataset.set_epoch(42)
        return dataset

    full = list(itertools.islice(build("bagel"), CUT + 6))  # NeMo's positions are the reference's
    state = _nemo_state(build("bagel").group_names, full[:CUT])
    default = build(None)
    default.load_state_dict(state)
    with pytest.raises(
        ResumeError, match=r"NeMo AutoModel checkpoint: the positions of t2i_pretrain .*compat=\"bagel\""
    ):
        next(iter(default))
    resumed = build("bagel")
    resumed.load_state_dict(state)
    t2i = [item["data_indexes"] for batch in itertools.islice(resumed, 3) for item in batch["batch_data_indexes"]
           if item["dataset_name"] == "t2i_pretrain"]  # fmt: skip
    done = len(_by_group(full[:CUT])["t2i_pretrain"])
    assert t2i and t2i == _by_group(full)["t2i_pretrain"][done : done + len(t2i)]
