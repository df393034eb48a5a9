"""Checkpoints and `data_status` are checked, not trusted (issue 27).

A hand-edited checkpoint (a cursor past the end or negative, a buffer repeating a row or
over its size, a missing or mistyped field) is a `ResumeError` naming the field, never a
bare KeyError / TypeError / ValueError, and never used as it is. A `data_status` after a
JSON round trip (string worker ids) resumes as the original; a tampered one (negative, past
the end, wrong length, a group name with a typo) is refused by name. A hypothesis test
mutates a real checkpoint at random: every result loads and packs, or is a ResumeError.
"""

from __future__ import annotations

import copy
import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bagel_data import ResumeError, make_bagel_multimodal_dataset
from helpers.builders import solid_jpeg, write_t2i

ROW = {"image": solid_jpeg(64, 48, (200, 30, 30)), "captions": {"c": "a red square on a plain background"}}
GROUP = {
    "t2i_pretrain": {
        "dataset_names": ["t2i"],
        "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32},
        "num_used_data": [3],
        "weight": 1,
    }
}
PACKING = dict(expected_num_tokens=60, max_num_tokens=100, max_num_tokens_per_sample=90, prefer_buffer_before=10)


def _build(folder, tokenizer, special_tokens, data_status=None, **packing):
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=GROUP,
        dataset_info={"t2i_pretrain": {"t2i": {"data_dir": folder}}},
        num_workers=1,
        data_status=data_status,
        **dict(PACKING, max_buffer_size=2, **packing),
    )


# These cursors and positions are the walk by whole units' (tars', a user family's, compat's); the
# default walk by rows is checked in tests/test_row_walk.py.
pytestmark = pytest.mark.walk_by_units


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("t2i")
    write_t2i(root, [[[ROW] * 3, [ROW] * 2], [[ROW] * 4]])
    return str(root)


@pytest.fixture(scope="module")
def dataset(folder, tokenizer, special_tokens):
    return _build(folder, tokenizer, special_tokens)


@pytest.fixture(scope="module")
def checkpoint(dataset):
    stream = iter(dataset)
    list(itertools.islice(stream, 3))
    state = copy.deepcopy(dataset.state_dict())
    assert state["stages"]["draw"]["cursors"]["t2i_pretrain"] is not None
    return state


def _resume(dataset, state):
    dataset.load_state_dict(state)
    return next(iter(dataset))


def _with(state, field, value):
    state = copy.deepcopy(state)
    *path, last = field
    target = state
    for key in path:
        target = target[key]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return state


_DELETE = object()
CURSOR = ("stages", "draw", "cursors", "t2i_pretrain")


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        (CURSOR, [0, 99, 0, 0], "cursors.t2i_pretrain .*past the"),
        (CURSOR, [0, 0, -1, 0], "cursors.t2i_pretrain .*non-negative"),
        (CURSOR, [0, 0, 0], "cursors.t2i_pretrain .*4 entries"),
        (CURSOR, "zero", "cursors.t2i_pretrain"),
        (("stages", "overflow", "buffer"), [["t2i_pretrain", [0, 0, 0, 1]]] * 2, r"buffer\[1\] .*twice"),
        (
            ("stages", "overflow", "buffer"),
            [["t2i_pretrain", [0, 0, 0, i]] for i in range(3)],
            "buffer .*max_buffer_size=2",
        ),
        (("stages", "overflow", "buffer"), [["t2i_pretain", [0, 0, 0, 1]]], r"buffer\[0\] .*unknown group"),
        (("stages", "overflow", "carry"), ["t2i_pretrain", [0, 9, 0, 0]], "carry .*past the"),
        (CURSOR, _DELETE, r"stages.draw.cursors .*for every group; \['t2i_pretrain'\] missing"),
        (("stages", "draw", "cursors", "t2i"), None, "stages.draw.cursors .*unknown group"),
        (("stages", "draw"), _DELETE, "stages.draw.cursors is missing"),
        (("stages", "overflow"), _DELETE, "stages.overflow.buffer is missing"),
        (("stages", "overflow", "buffer"), {}, "stages.overflow.buffer .*a list"),
        # A field of an older version at the top of today's checkpoint would be ignored: refused.
        (("buffer",), [], "checkpoint field buffer = .*keeps it under stages.overflow.buffer"),
        (("cursors",), {}, "checkpoint field cursors = .*keeps it under stages.draw.cursors"),
        (("topology",), {"rank": 0}, "topology"),
        (("packs",), -3, "packs"),
        (("rng",), _DELETE, "rng is missing"),
        (("rng",), {"bit_generator": "PCG64", "state": "junk"}, "checkpoint field rng"),
        (("skips",), {"t2i_pretrain": {"x": -1}}, "skips.t2i_pretrain"),
    ],
)
def test_each_malformed_field_is_a_resume_error_naming_it(dataset, checkpoint, field, value, named):
    with pytest.raises(ResumeError, match=named):
        _resume(dataset, _with(checkpoint, field, value))


def test_the_unmodified_checkpoint_still_resumes(dataset, checkpoint):
    assert _resume(dataset, copy.deepcopy(checkpoint))["sample_lens"]


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.lists(st.integers(-3, 2**40), max_size=5),
    st.lists(st.one_of(st.text(max_size=12), st.lists(st.integers(-2, 9), max_size=5)), max_size=4),
    st.dictionaries(st.text(max_size=12), st.integers(-3, 5), max_size=3),
)


def _fields(state, prefix=()):
    """Every path into the checkpoint: the fuzz may replace or delete any of them."""
    for key, value in state.items():
        yield (*prefix, key)
        if isinstance(value, dict) and key not in ("rng",):
            yield from _fields(value, (*prefix, key))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_checkpoints_load_or_raise_resume_error(dataset, checkpoint, data):
    fields = sorted(_fields(checkpoint), key=repr)
    field = data.draw(st.sampled_from(fields), label="field")
    value = data.draw(st.one_of(st.just(_DELETE), JUNK), label="value")
    mutated = _with(checkpoint, field, value)
    try:
        batch = _resume(dataset, mutated)
    except ResumeError:
        return
    assert batch["sample_lens"] and 0 not in batch["sample_lens"]


# -- data_status ----------------------------------------------------------------------------
def _indexes(folder, tokenizer, special_tokens, data_status, batches=2):
    packed = _build(folder, tokenizer, special_tokens, data_status=data_status)
    return [batch["batch_data_indexes"] for batch in itertools.islice(iter(packed), batches)]


def test_data_status_survives_a_json_round_trip(folder, tokenizer, special_tokens):
    # This library's own position: 3 of 2 files is not the reference's file list, so it is tagged.
    position = _indexes(folder, tokenizer, special_tokens, None, batches=1)[0][0]["data_indexes"]
    assert len(position) == 4
    status = {"t2i_pretrain": {0: position}}
    trip = json.loads(json.dumps(status))
    assert list(trip["t2i_pretrain"]) == ["0"]
    assert _indexes(folder, tokenizer, special_tokens, trip) == _indexes(folder, tokenizer, special_tokens, status)


@pytest.mark.parametrize(
    ("status", "named"),
    [
        ({"t2i_pretrian": {0: [0, 0, 1]}}, "unknown group.*t2i_pretrian"),
        ({"t2i_pretrain": {0: [0, -1, 1]}}, r"data_status.t2i_pretrain\[0\]"),
        ({"t2i_pretrain": {0: [7, 0, 0]}}, r"data_status\[0\] .*under its 3 unit"),
        ({"t2i_pretrain": {0: [0, 0]}}, r"data_status\[0\] .*3 non-negative"),
        ({"t2i_pretrain": {"worker": [0, 0, 0]}}, "worker id 'worker' is not an int"),
        ({"t2i_pretrain": {1: [0, 0, 0]}}, "no entry for worker 0"),
    ],
)
def test_a_tampered_data_status_is_refused_by_name(folder, tokenizer, special_tokens, status, named):
    with pytest.raises(ResumeError, match=named):
        _indexes(folder, tokenizer, special_tokens, status, batches=1)


def test_a_cursor_is_refused_from_its_work_list_length_on(dataset, checkpoint):
    """The last item of the worker's work list resumes; one past it is refused."""
    from bagel_data.sharding import phase_work

    family = dataset.grouped_datasets[0]
    length = len(phase_work(family.worker_shard(), family.restart_plan, 0))
    assert _resume(dataset, _with(checkpoint, CURSOR, [0, length - 1, 0, 0]))["sample_lens"]
    with pytest.raises(ResumeError, match=f"index {length} is past the {length} item"):
        _resume(dataset, _with(checkpoint, CURSOR, [0, length, 0, 0]))


def test_a_cursor_row_is_refused_from_its_row_groups_end_on(dataset, checkpoint):
    """The last row of a row group resumes (at the next one); the row after it, or a row
    group the file lacks, is a ResumeError naming the group, file, row group, size and fix,
    never a silent start at the next row group."""
    import pyarrow.parquet as pq

    family = dataset.grouped_datasets[0]
    path = family.epoch_units[int(family.worker_shard().unit_ids[0])]
    footer = pq.ParquetFile(path).metadata
    rows = footer.row_group(0).num_rows
    assert _resume(dataset, _with(checkpoint, CURSOR, [0, 0, 0, rows - 1]))["sample_lens"]
    past_end = f"t2i_pretrain: row {rows} does not exist: {path}, row group 0 has {rows} row.*resume from"
    with pytest.raises(ResumeError, match=past_end):
        _resume(dataset, _with(checkpoint, CURSOR, [0, 0, 0, rows]))
    groups = footer.num_row_groups
    with pytest.raises(ResumeError, match=f"row group {groups} does not exist: {path} has {groups} row group"):
        _resume(dataset, _with(checkpoint, CURSOR, [0, 0, groups, 0]))
    with pytest.raises(ResumeError, match=rf"buffer\[0\] .*row {rows} does not exist"):
        _resume(dataset, _with(checkpoint, ("stages", "overflow", "buffer"), [["t2i_pretrain", [0, 0, 0, rows]]]))


def test_a_buffered_sample_that_waited_resumes(dataset, checkpoint):
    """A best-fit buffer entry records the packs it waited beside mandatory samples as a
    fourth value (`[group, cursor, compat state, packs waited]`): it is read, not refused."""
    group, cursor = "t2i_pretrain", [0, 0, 0, 0]  # a row already read: rebuilt on resume
    state = _with(checkpoint, ("stages", "overflow", "buffer"), [[group, cursor, None, 2]])
    assert _resume(dataset, state)["sample_lens"]
    with pytest.raises(ResumeError, match="packs waited"):
        _resume(dataset, _with(checkpoint, ("stages", "overflow", "buffer"), [[group, cursor, None, -1]]))


def test_a_waiting_row_after_its_groups_cursor_is_refused(dataset, checkpoint):
    """A buffered row at the cursor (the last row drawn) resumes; after it (or the cursor
    moved back behind it), the stream would draw it again and pack it twice."""
    cursor = checkpoint["stages"]["draw"]["cursors"]["t2i_pretrain"]
    assert cursor > [0, 0, 0, 0], "the checkpoint must be past the first row"
    state = _with(
        _with(checkpoint, ("stages", "overflow", "carry"), None),
        ("stages", "overflow", "buffer"),
        [["t2i_pretrain", cursor]],
    )
    assert _resume(dataset, state)["sample_lens"]
    with pytest.raises(ResumeError, match=r"buffer\[0\] .*after stages.draw.cursors.t2i_pretrain"):
        _resume(dataset, _with(state, CURSOR, [0, 0, 0, 0]))
    carried = _with(
        _with(checkpoint, ("stages", "overflow", "buffer"), []),
        ("stages", "overflow", "carry"),
        ["t2i_pretrain", cursor],
    )
    with pytest.raises(ResumeError, match="carry .*after stages.draw.cursors.t2i_pretrain"):
        _resume(dataset, _with(carried, CURSOR, [0, 0, 0, 0]))


def _saved(**changes) -> dict:
    """The smallest whole checkpoint `check_shape` reads, of groups g and h, with `changes`
    (`cursors`, `buffer` and `carry` go where version 6 keeps them: under their stages)."""
    draw = {"cursors": changes.pop("cursors", {"g": [0, 1, 5], "h": None})}
    overflow = {"buffer": changes.pop("buffer", [["g", [0, 1, 3]]]), "carry": changes.pop("carry", None)}
    saved = {
        "packs": 1,
        "tokens": 10,
        "data_seed": 0,
        "topology": {"rank": 0, "world_size": 1, "worker_id": 0, "num_workers": 1},
        "units": {},
        "rng": {},
        "samples": {"g": 2, "h": 0},
        "skips": {},
        "stages": {"draw": draw, "overflow": overflow},
    }
    saved.update(changes)
    return saved


def test_check_shape_takes_each_limit_and_refuses_past_it():
    from bagel_data.checkpoint import checks

    groups = ["g", "h"]

    def check_shape(saved: dict, group_names: list[str]) -> None:
        """The worker's fields, then the draw path's and the overflow's parts, as a load checks them."""
        checks.check_shape(saved, group_names)
        checks.check_cursors("stages.draw.cursors", saved["stages"]["draw"]["cursors"], group_names)
        waiting = saved["stages"]["overflow"]
        checks.check_waiting("stages.overflow", waiting["buffer"], waiting["carry"], group_names)

    check_shape(_saved(), groups)
    check_shape(_saved(data_seed=-5), groups)  # a seed may be negative; counters may not
    check_shape(_saved(packs=10, tokens=10), groups)  # one-token packs: as many packs as tokens
    check_shape(_saved(cursors={"g": [-2, 0, 0], "h": None}), groups)  # the inherited phase
    with pytest.raises(ResumeError, match="the phase is -3"):
        check_shape(_saved(cursors={"g": [-3, 0, 0], "h": None}), groups)
    with pytest.raises(ResumeError, match="carried row is also in the buffer"):
        check_shape(_saved(carry=["g", [0, 1, 3]]), groups)
    with pytest.raises(ResumeError, match="samples = .11 in all.: at most"):
        check_shape(_saved(samples={"g": 6, "h": 5}), groups)  # each group alone is under the tokens
    with pytest.raises(ResumeError, match="entry 2 is -1"):  # a cursor of no known kind: entries by number
        check_shape(_saved(cursors={"g": [0, 1, -1, 0, 0], "h": None}), groups)


def test_a_waiting_row_at_its_groups_cursor_was_drawn():
    from bagel_data.checkpoint.checks import check_waiting_drawn

    check_waiting_drawn(["g"], [[0, 1, 5]], [("buffer[0]", 0, [0, 1, 5])])  # the last row drawn
    with pytest.raises(ResumeError, match="drawn again"):
        check_waiting_drawn(["g"], [[0, 1, 5]], [("buffer[0]", 0, [0, 1, 6])])


def test_a_data_status_worker_may_have_no_position_but_no_negative_id():
    from bagel_data.checkpoint.checks import check_data_status

    assert check_data_status({"g": {"0": None, "1": [0, 3]}}, ["g"]) == {"g": {0: None, 1: [0, 3]}}
    with pytest.raises(ResumeError, match="worker id -1 is negative"):
        check_data_status({"g": {"-1": [0, 3]}}, ["g"])
