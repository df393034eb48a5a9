"""A checkpoint names each row once, and a resumed run packs each row once (issue 41).

A row that a checkpoint holds twice (twice in the buffer, carried and buffered, a carry that
is a list of entries) would be packed twice: it is a ResumeError naming the field. A cursor
entry below its range (the unit, the row group or the row at -1, the phase under the
inherited one) is a ResumeError naming the field and the entry. And over the first pass of a
stream whose buffer and carry are full at the cut, the resumed run emits every row exactly
once, in the uninterrupted run's order.
"""

from __future__ import annotations

import collections
import copy
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bagel_data import ResumeError, make_bagel_multimodal_dataset
from helpers.builders import solid_jpeg, write_t2i

GROUP = "t2i_pretrain"
GROUPS = {
    GROUP: {
        "dataset_names": ["t2i"],
        "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32},
        "num_used_data": [3],
        "weight": 1,
    }
}
# Samples of 6 to 75 tokens against a pack of 90 to 100: rows wait in the buffer and the carry.
PACKING = dict(
    expected_num_tokens=90, max_num_tokens=100, max_num_tokens_per_sample=90, prefer_buffer_before=10, max_buffer_size=3
)
SHAPES = [(64, 48, 40), (32, 32, 5), (64, 64, 55), (48, 32, 30), (32, 48, 8), (64, 32, 25)]
ROWS_PER_PASS = 24
FIRST_PASS_BATCHES = 8  # the packs before the stream draws the second pass's first row


# These cursors and positions are the walk by whole units' (tars', a user family's, compat's); the
# default walk by rows is checked in tests/test_row_walk.py.
pytestmark = pytest.mark.walk_by_units


def _row(width: int, height: int, words: int) -> dict:
    return {"image": solid_jpeg(width, height, (200, 30, 30)), "captions": {"c": " ".join(["red"] * words)}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    rows = [_row(*SHAPES[i % len(SHAPES)]) for i in range(ROWS_PER_PASS)]
    groups = [rows[i : i + 4] for i in range(0, ROWS_PER_PASS, 4)]
    root = tmp_path_factory.mktemp("t2i")
    write_t2i(root, [groups[0:2], groups[2:4], groups[4:6]])  # 3 files of 2 row groups of 4 rows
    return str(root)


def _build(folder, tokenizer, special_tokens):
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=GROUPS,
        dataset_info={GROUP: {"t2i": {"data_dir": folder}}},
        num_workers=1,
        **PACKING,
    )


def _rows(batch) -> list[tuple]:
    return [tuple(where["data_indexes"]) for where in batch["batch_data_indexes"]]


@pytest.fixture(scope="module")
def dataset(folder, tokenizer, special_tokens):
    return _build(folder, tokenizer, special_tokens)


@pytest.fixture(scope="module")
def checkpoint(dataset):
    """A checkpoint after 2 packs: its buffer is full and a row is carried."""
    stream = iter(dataset)
    list(itertools.islice(stream, 2))
    state = copy.deepcopy(dataset.state_dict())
    assert len(state["stages"]["overflow"]["buffer"]) == 3 and state["stages"]["overflow"]["carry"] is not None
    return state


def _resume(dataset, state):
    dataset.load_state_dict(state)
    return next(iter(dataset))


def _waiting(checkpoint: dict, buffer: list, carry) -> dict:
    """A copy of `checkpoint` whose overflow holds `buffer` and `carry`."""
    state = copy.deepcopy(checkpoint)
    state["stages"]["overflow"].update(buffer=buffer, carry=carry)
    return state


def _entry(cursor, **extra):
    return {"v": 1, "group": GROUP, "cursor": list(cursor), **extra}


def _drawn_rows(checkpoint) -> list[list[int]]:
    """Rows at or before the checkpoint's cursor (drawn), not buffered or carried there."""
    held = {
        tuple(entry["cursor"])
        for entry in [*checkpoint["stages"]["overflow"]["buffer"], checkpoint["stages"]["overflow"]["carry"]]
    }
    final = checkpoint["stages"]["draw"]["cursors"][GROUP]
    rows = [[0, 0, group, row] for group in range(2) for row in range(4)]
    rows += [[0, 1, group, row] for group in range(2) for row in range(4)]
    return [row for row in rows if row <= final and tuple(row) not in held]


# -- a row held twice -------------------------------------------------------------------------
def test_two_distinct_buffered_rows_and_a_third_carried_resume(dataset, checkpoint):
    first, second, third = _drawn_rows(checkpoint)[:3]
    state = _waiting(checkpoint, [_entry(first), ["t2i_pretrain", second]], _entry(third))
    assert _resume(dataset, state)["sample_lens"]


def test_the_same_row_twice_in_the_buffer_is_refused_whatever_its_form_or_wait(dataset, checkpoint):
    """A dict entry and a version-2 list of the same row, with another wait: the row counts."""
    row = _drawn_rows(checkpoint)[0]
    state = _waiting(checkpoint, [_entry(row, waited=2), [GROUP, row]], None)
    with pytest.raises(ResumeError, match=r"checkpoint field stages.overflow.buffer\[1\] .*the same row twice"):
        _resume(dataset, state)


def test_a_carried_row_that_is_also_buffered_is_refused(dataset, checkpoint):
    first, second = _drawn_rows(checkpoint)[:2]
    state = _waiting(checkpoint, [_entry(first), _entry(second)], [GROUP, second, None, 0])
    with pytest.raises(ResumeError, match="checkpoint field stages.overflow.carry .*also in the buffer"):
        _resume(dataset, state)


@pytest.mark.parametrize("form", ["dict", "list"])
def test_a_carry_holding_a_row_twice_is_refused_as_a_list_of_entries(dataset, checkpoint, form):
    row = _drawn_rows(checkpoint)[0]
    entry = _entry(row) if form == "dict" else [GROUP, row]
    state = _waiting(checkpoint, [], [entry, copy.deepcopy(entry)])
    with pytest.raises(
        ResumeError, match="checkpoint field stages.overflow.carry .*one \\[group, cursor\\] entry, not a list"
    ):
        _resume(dataset, state)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_row_held_twice_is_refused_and_distinct_rows_resume(dataset, checkpoint, data):
    """Distinct drawn rows in the buffer and the carry, in either entry form, resume; one of
    them repeated, in the buffer or as the carry, is refused."""
    drawn = _drawn_rows(checkpoint)
    rows = data.draw(st.lists(st.sampled_from(drawn), min_size=1, max_size=2, unique_by=tuple), label="rows")
    as_dicts = data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows)), label="dict forms")
    entries = [_entry(row) if as_dict else [GROUP, row] for row, as_dict in zip(rows, as_dicts)]
    carry = entries.pop() if data.draw(st.booleans(), label="carry the last") else None
    state = _waiting(checkpoint, entries, carry)
    assert _resume(dataset, copy.deepcopy(state))["sample_lens"]
    repeated = copy.deepcopy(data.draw(st.sampled_from([*entries, *([carry] if carry else [])]), label="repeated"))
    if repeated in entries and data.draw(st.booleans(), label="as the carry"):
        state["stages"]["overflow"]["carry"] = repeated
    else:
        state["stages"]["overflow"]["buffer"] = [*entries, repeated]  # at most 2 + 1: within max_buffer_size
    with pytest.raises(ResumeError, match="the same row twice|also in the buffer"):
        _resume(dataset, state)


# -- negative cursors -------------------------------------------------------------------------
NEGATIVE = [(0, -3, "the phase is -3"), (1, -1, "the unit .* is -1"), (2, -1, "the row group is -1")]
NEGATIVE += [(3, -1, "the row is -1")]


@pytest.mark.parametrize(("position", "value", "named"), NEGATIVE)
@pytest.mark.parametrize("field", ["cursors", "buffer", "carry"])
def test_a_negative_cursor_entry_is_refused_naming_the_field_and_the_entry(
    dataset, checkpoint, field, position, value, named
):
    cursor = list(checkpoint["stages"]["draw"]["cursors"][GROUP] if field == "cursors" else _drawn_rows(checkpoint)[0])
    cursor[position] = value
    state = copy.deepcopy(checkpoint)
    if field == "cursors":
        state["stages"]["draw"]["cursors"][GROUP], label = cursor, f"stages.draw.cursors.{GROUP}"
    elif field == "buffer":
        state, label = _waiting(checkpoint, [_entry(cursor)], None), r"stages.overflow.buffer\[0\]"
    else:
        state, label = _waiting(checkpoint, [], _entry(cursor)), "stages.overflow.carry"
    with pytest.raises(ResumeError, match=f"checkpoint field {label} = .*non-negative.*{named}"):
        _resume(dataset, state)


def test_zero_in_every_entry_of_a_waiting_row_is_in_range(dataset, checkpoint):
    """The first row of the first row group of the first unit: each 0 is a valid entry."""
    state = _waiting(checkpoint, [], _entry([0, 0, 0, 0]))
    assert _resume(dataset, state)["sample_lens"]


# -- across a resume --------------------------------------------------------------------------
def test_a_resumed_first_pass_packs_every_row_once_in_order(folder, tokenizer, special_tokens):
    """Cut after each pack of the first pass (the buffer full and a row carried at most
    cuts), rebuild from the checkpoint: the packs before and after the cut hold each row of
    the pass once, as the uninterrupted run does."""
    stream = iter(_build(folder, tokenizer, special_tokens))
    uninterrupted = [_rows(batch) for batch in itertools.islice(stream, FIRST_PASS_BATCHES)]
    flat = [row for rows in uninterrupted for row in rows]
    assert len(flat) == len(set(flat)), "the window must lie within the first pass"
    held_at_cuts = []
    for cut in range(1, FIRST_PASS_BATCHES):
        dataset = _build(folder, tokenizer, special_tokens)
        before = [_rows(batch) for batch in itertools.islice(iter(dataset), cut)]
        state = copy.deepcopy(dataset.state_dict())
        held_at_cuts.append(
            len(state["stages"]["overflow"]["buffer"]) + (state["stages"]["overflow"]["carry"] is not None)
        )
        resumed = _build(folder, tokenizer, special_tokens)
        resumed.load_state_dict(state)
        after = [_rows(batch) for batch in itertools.islice(iter(resumed), FIRST_PASS_BATCHES - cut)]
        counts = collections.Counter(row for rows in before + after for row in rows)
        twice = sorted(row for row, count in counts.items() if count > 1)
        assert not twice, f"cut {cut}: rows packed twice across the resume: {twice}"
        assert before + after == uninterrupted, f"cut {cut}: the resumed run differs"
    assert max(held_at_cuts) == 4, "some cut must hold a full buffer and a carried row"
