"""The checkpoint form of a packing worker's state (checkpoint/state.py).

Buffer and carry entries are versioned `BufferEntry` dicts; a version-2 checkpoint, whose
entries are positional lists, still loads and continues exactly as the same checkpoint
written today. The packer's generator state is checked when it is loaded: a value out of
range is a ResumeError naming `rng`, not a raw OverflowError at the first pack.
"""

from __future__ import annotations

import copy
import itertools

import pytest

from bagel_data.checkpoint.state import STATE_VERSION, BufferEntry, ResumeError
from bagel_data.packing.config import PackingConfig
from helpers.fake_groups import FakeGroup, packed_groups
from helpers.plans import TOKENS_DICT, text_sample

CONFIG = PackingConfig(
    expected_num_tokens=90,
    max_num_tokens=100,
    max_num_tokens_per_sample=80,
    prefer_buffer_before=40,
    max_buffer_size=4,
    use_flex=True,
)


def _groups() -> dict:
    def lengths(i: int) -> int:
        return 10 + (i * 37) % 60

    return {
        name: FakeGroup(name, lambda i, name=name: text_sample(lengths(i), index=i, dataset_name=name)) for name in "ab"
    }


def _build(strategy: str):
    return packed_groups(_groups(), PackingConfig(**{**CONFIG.__dict__, "pack_strategy": strategy}), TOKENS_DICT)


def _checkpoint_with_waiting_samples(strategy: str) -> dict:
    dataset = _build(strategy)
    stream = iter(dataset)
    for _ in range(40):
        next(stream)
        state = dataset.state_dict()
        carried = state["stages"]["overflow"]["carry"] is not None or strategy == "best_fit"  # best-fit carries nothing
        if len(state["stages"]["overflow"]["buffer"]) >= 2 and carried:
            return copy.deepcopy(state)
    raise AssertionError("no pack left samples waiting: the test does not test it")


def _as_version_2(state: dict) -> dict:
    """`state` as version 2 wrote it: entries `[group, cursor]`, plus the compat stream state
    and packs waited when there were any."""
    old = copy.deepcopy(state)
    old["version"] = 2
    # The stages' own states came with versions 5 and 6 (real old ones: test_old_versions.py);
    # version 2 kept the cursors, the buffer and the carry at the top.
    waiting = old.pop("stages")["overflow"]
    old["cursors"] = state["stages"]["draw"]["cursors"]

    def positional(raw: dict) -> list:
        entry = [raw["group"], raw["cursor"]]
        return [*entry, raw["rng_state"], raw["waited"]] if raw["waited"] else entry

    carry = waiting["carry"]
    old["buffer"] = [positional(raw) for raw in waiting["buffer"]]
    old["carry"] = None if carry is None else [carry["group"], carry["cursor"]]
    return old


def _next_packs(state: dict, strategy: str, count: int = 6) -> list:
    dataset = _build(strategy)
    dataset.load_state_dict(state)
    return [batch["batch_data_indexes"] for batch in itertools.islice(iter(dataset), count)]


@pytest.mark.parametrize("strategy", ["greedy", "best_fit"])
def test_a_version_2_checkpoint_continues_as_todays(strategy):
    state = _checkpoint_with_waiting_samples(strategy)
    assert state["version"] == STATE_VERSION and all(raw["v"] == 1 for raw in state["stages"]["overflow"]["buffer"])
    today = _next_packs(state, strategy)
    old = _as_version_2(state)
    assert old["buffer"] and all(isinstance(raw, list) for raw in old["buffer"])
    assert _next_packs(old, strategy) == today
    # the waiting samples are the first rows the resumed packs hold: they were read back
    waiting = {(raw["group"], raw["cursor"][0]) for raw in state["stages"]["overflow"]["buffer"]}
    packed = {(where["dataset_name"], where["data_indexes"]) for pack in today for where in pack}
    assert waiting <= packed


def test_an_entry_reads_back_from_both_forms():
    entry = BufferEntry("a", (0, 3, 1), {"compat": "bagel"}, 2)
    assert BufferEntry.read(entry.to_saved()) == entry
    assert BufferEntry.read(["a", [0, 3, 1], {"compat": "bagel"}, 2]) == entry
    assert BufferEntry.read(["a", [0, 3, 1]]) == BufferEntry("a", (0, 3, 1))


@pytest.mark.parametrize("field", ["state", "inc"])
@pytest.mark.parametrize("value", [-1, 2**200, 2**128])
def test_an_rng_state_out_of_range_is_refused_at_load(field, value):
    state = _checkpoint_with_waiting_samples("greedy")
    state["rng"]["state"][field] = value
    dataset = _build("greedy")
    dataset.load_state_dict(state)
    with pytest.raises(ResumeError, match=f"checkpoint field rng: .*state.{field} = {value}"):
        next(iter(dataset))


def test_the_largest_rng_state_loads():
    state = _checkpoint_with_waiting_samples("greedy")
    state["rng"]["state"]["state"] = 2**128 - 1
    assert _next_packs(state, "greedy", 1)
