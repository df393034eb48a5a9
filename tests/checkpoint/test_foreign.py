"""checkpoint/foreign.py on its own: which saved dicts are NeMo AutoModel checkpoints, and the
cursors, buffer and pack count it takes from one (tests/dropin/test_nemo_checkpoint.py runs
the same format through a whole PackedDataset)."""

from __future__ import annotations

import numpy as np
import pytest

from bagel_data import ResumeError
from bagel_data.checkpoint.foreign import is_nemo_state, load_nemo_state
from bagel_data.checkpoint.state import DRAW, OVERFLOW, PackState
from bagel_data.packing.groups import DrawState
from bagel_data.packing.overflow import OverflowState
from bagel_data.sample import Draw
from bagel_data.sharding import WorkerTopology

GROUPS = ["t2i", "vlm", "edit"]


def _state(worker_id: int = 0, num_workers: int = 2) -> PackState:
    state = PackState(
        topology=WorkerTopology(0, 1, worker_id, num_workers),
        data_seed=0,
        units=[1, 1, 1],
        rng=np.random.default_rng(0),
        logs=[],
        stages={DRAW: DrawState(GROUPS), OVERFLOW: OverflowState(GROUPS)},
        packs=17,
    )
    state.draw.cursors = [(9, 9)] * 3
    state.overflow.buffer.append(Draw(0, (5, 5)))  # left from before the load: must go
    return state


def _saved(statuses, buffer=(), **extra) -> dict:
    return {
        "version": 1,
        "grouped_dataset_states": [None if s is None else {"data_status": s} for s in statuses],
        "buffer": list(buffer),
        **extra,
    }


@pytest.mark.parametrize(
    "saved, expected",
    [
        ({"version": 1, "grouped_dataset_states": []}, True),
        ({"version": 1, "grouped_dataset_states": [], "buffer": []}, True),
        ({"version": 2, "grouped_dataset_states": []}, False),  # another format version
        ({"version": 1}, False),  # no group states
        ({"version": 1, "grouped_dataset_states": [], "topology": {}}, False),  # ours carries a topology
        ([("version", 1), ("grouped_dataset_states", [])], False),  # not a dict at all
        (None, False),
    ],
)
def test_is_nemo_state_takes_only_version_1_with_group_states_and_no_topology(saved, expected):
    assert is_nemo_state(saved) is expected


def test_each_group_continues_after_this_workers_position_in_the_first_pass():
    state = _state(worker_id=0)
    load_nemo_state(state, _saved([[[3, 1]], [7], None], yielded_batches=4), GROUPS)
    # a list position and a scalar one both become first-pass cursors; no status, no cursor
    assert state.draw.cursors == [(0, 3, 1), (0, 7), None]
    assert list(state.overflow.buffer) == []  # the old buffer is cleared
    assert state.packs == 4


def test_a_missing_pack_count_is_zero_and_a_missing_buffer_is_empty():
    state = _state()
    saved = _saved([None, None, None])
    del saved["buffer"]
    load_nemo_state(state, saved, GROUPS)
    assert state.packs == 0 and list(state.overflow.buffer) == [] and state.draw.cursors == [None, None, None]
    load_nemo_state(state, {**saved, "buffer": None}, GROUPS)
    assert list(state.overflow.buffer) == []


def test_a_group_entry_without_data_status_has_no_cursor():
    state = _state()
    saved = _saved([None, [4], None])
    saved["grouped_dataset_states"][0] = {"other": 1}
    load_nemo_state(state, saved, GROUPS)
    assert state.draw.cursors == [None, (0, 4), None]


def test_a_reference_dict_status_is_read_by_worker_id_as_int_or_string():
    state = _state(worker_id=1)
    statuses = [{0: [1], 1: [2, 5]}, {"0": 3, "1": [8]}, {0: [1], "1": [6], 1: [4]}]
    load_nemo_state(state, _saved(statuses), GROUPS)
    # the int key wins over its string form; a worker missing from the dict has no cursor
    assert state.draw.cursors == [(0, 2, 5), (0, 8), (0, 4)]
    load_nemo_state(state, _saved([{0: [1]}, {}, {"0": 2}]), GROUPS)
    assert state.draw.cursors == [None, None, None]


def test_a_list_status_is_indexed_by_worker_id_and_may_be_short():
    state = _state(worker_id=1)
    load_nemo_state(state, _saved([[None, [2]], [None], []]), GROUPS)
    assert state.draw.cursors == [(0, 2), None, None]


def test_another_workers_position_is_a_resume_error_naming_it():
    state = _state(worker_id=0)
    with pytest.raises(ResumeError, match=r"vlm holds positions of worker\(s\) \[1, 2\].*loaded into worker 0") as info:
        load_nemo_state(state, _saved([[[1]], [None, [0, 3], [4]], None]), GROUPS)
    assert "data_status=" in str(info.value)
    # its own position beside other workers' Nones is fine
    load_nemo_state(state, _saved([[[1], None, None], None, None]), GROUPS)
    assert state.draw.cursors == [(0, 1), None, None]


def test_a_different_number_of_groups_is_a_resume_error():
    with pytest.raises(ResumeError, match=r"with 2 groups, this pipeline has 3") as info:
        load_nemo_state(_state(), _saved([None, None]), GROUPS)
    assert "data_status=" in str(info.value)
    with pytest.raises(ResumeError, match=r"with 4 groups"):
        load_nemo_state(_state(), _saved([None] * 4), GROUPS)


def test_buffered_samples_are_taken_by_group_name_in_order():
    state = _state()
    buffer = [
        {"num_tokens": 3, "data_indexes": {"dataset_name": "edit", "data_indexes": [2, 0]}},
        {"num_tokens": 4, "data_indexes": {"dataset_name": "t2i", "data_indexes": 5}},
    ]
    load_nemo_state(state, _saved([None, None, None], buffer), GROUPS)
    assert [(b.group, b.cursor, b.sample) for b in state.overflow.buffer] == [(2, (0, 2, 0), None), (0, (0, 5), None)]


@pytest.mark.parametrize(
    "sample",
    [
        [("dataset_name", "t2i")],  # not a dict
        {"num_tokens": 1},  # no position
        {"data_indexes": [0, 1]},  # a position without its group
        {"data_indexes": {"dataset_name": "video", "data_indexes": [0]}},  # a group this pipeline lacks
        {"data_indexes": {"dataset_name": "t2i"}},  # a group without a position
    ],
)
def test_a_buffered_sample_without_a_known_position_is_a_resume_error(sample):
    with pytest.raises(ResumeError, match="buffered sample without a known position.*data_status="):
        load_nemo_state(_state(), _saved([None, None, None], [sample]), GROUPS)
