"""A schedule's change point (packing/pacing.py): the buffer does not hold the new mixture back.

Stage 1 packs the `vlm` group alone; from step `SWITCH` on the targets are 0.2 / 0.5 / 0.3
(`vlm` / `t2i` / `edit`), `mix_by: tokens`, a buffer of 50, as in issue 40. Two ranks x two
DataLoader workers are emulated in one process (`as_worker`): each rank's dataset, each
worker's share of the steps (`w, w + 2, ...`) and its own generator, as a DataLoader's
workers have them; every (rank, worker) stream draws rows of its own (`_groups`). Before
the fix, best fit packed VLM alone for 6 steps after the switch and 0.41 of the tokens over
steps switch+5..switch+15; greedy 0.62.
"""

from __future__ import annotations

import collections
import itertools

import pytest

from bagel_data.checkpoint.state import STATE_VERSION
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.pacing import DRAIN_FLOOR
from bagel_data.packing.packed_dataset import PackedDataset
from bagel_data.packing.schedule import parse_weight
from helpers.fake_groups import FakeGroup
from helpers.golden import as_worker
from helpers.plans import TOKENS_DICT, text_sample

SWITCH = 20
WORKERS = 2
TARGETS = {"vlm": 0.2, "t2i": 0.5, "edit": 0.3}
STAGES = {name: [[0, 1.0 if name == "vlm" else 0.0], [SWITCH, share]] for name, share in TARGETS.items()}
LENGTHS = {"vlm": lambda i: 20 + (i * 7) % 41, "t2i": lambda i: 10 + (i * 5) % 23, "edit": lambda i: 30 + (i * 3) % 37}
STRATEGIES = ["greedy", "best_fit"]


def _config(strategy: str, **changes) -> PackingConfig:
    base = dict(
        expected_num_tokens=380,
        max_num_tokens=400,
        max_num_tokens_per_sample=200,
        prefer_buffer_before=200,
        max_buffer_size=50,
        use_flex=True,
        text_cond_dropout_prob=0.0,
        vit_cond_dropout_prob=0.0,
        vae_cond_dropout_prob=0.0,
        mix_by="tokens",
        pack_strategy=strategy,
    )
    return PackingConfig(**{**base, **changes})


def _groups(stream: int) -> dict[str, FakeGroup]:
    """The three groups as (rank, worker) stream `stream` reads them: rows of its own."""

    def make(name):
        return lambda i: text_sample(LENGTHS[name](i + 1000 * stream), index=i, dataset_name=name)

    return {name: FakeGroup(name, make(name)) for name in TARGETS}


def _dataset(strategy: str, rank: int, worker: int, stages=STAGES, **changes) -> tuple[PackedDataset, dict]:
    groups = _groups(rank * WORKERS + worker)
    dataset = PackedDataset.from_groups(
        groups,
        _config(strategy, **changes),
        TOKENS_DICT,
        weights={name: parse_weight(name, value) for name, value in stages.items()},
        mandatory=dict.fromkeys(groups, False),
        local_rank=rank,
        world_size=2,
        num_workers=WORKERS,
        data_seed=3,
    )
    return dataset, groups


def _tokens(batch) -> collections.Counter:
    tokens: collections.Counter = collections.Counter()
    for where, length in zip(batch["batch_data_indexes"], batch["sample_lens"]):
        tokens[where["dataset_name"]] += length
    return tokens


def _backlog(state: dict) -> int:
    """The pacer's backlog in a checkpoint (its own state, under `stages.pace`)."""
    return state["stages"]["pace"]["backlog"]


def _rows(batch) -> list[tuple[str, int]]:
    return [(where["dataset_name"], where["data_indexes"]) for where in batch["batch_data_indexes"]]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_token_shares_meet_the_new_targets_within_five_steps(strategy):
    """Over steps switch+5 .. switch+15, on 2 ranks x 2 workers, each group's share of the
    tokens is within 3 points of its Stage 2 target."""
    steps: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for rank in range(2):
        for worker in range(WORKERS):
            dataset, _ = _dataset(strategy, rank, worker)
            with as_worker(worker, WORKERS):
                for n, batch in enumerate(itertools.islice(iter(dataset), (SWITCH + 16) // WORKERS)):
                    steps[worker + WORKERS * n] += _tokens(batch)
    assert all(set(steps[step]) == {"vlm"} for step in range(SWITCH))
    window = sum((steps[step] for step in range(SWITCH + 5, SWITCH + 16)), collections.Counter())
    shares = {name: window[name] / sum(window.values()) for name in TARGETS}
    assert all(abs(shares[name] - TARGETS[name]) <= 0.03 for name in TARGETS), shares


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_buffered_sample_is_packed_once_at_its_groups_pace(strategy):
    """Every row a stream drew is packed exactly once or still waits, counted row by row;
    the samples waiting at the switch are all packed, at most at VLM's new pace; the
    look-ahead keeps its bound beside the backlog."""
    cfg, waited = _config(strategy), []
    for rank, worker in itertools.product(range(2), range(WORKERS)):
        dataset, groups = _dataset(strategy, rank, worker)
        packed: collections.Counter = collections.Counter()
        phase_tokens: collections.Counter = collections.Counter()
        at_switch: set | None = None
        state = dataset.state_dict()
        with as_worker(worker, WORKERS):
            for n, batch in enumerate(itertools.islice(iter(dataset), 60)):
                packed.update(_rows(batch))
                draining = at_switch is not None and _backlog(state) > 0  # before this pack
                state = dataset.state_dict()
                assert len(state["stages"]["overflow"]["buffer"]) - _backlog(state) <= cfg.max_buffer_size
                if at_switch is None and worker + WORKERS * (n + 1) >= SWITCH:  # the next pack opens Stage 2
                    at_switch = {(raw["group"], raw["cursor"][0]) for raw in state["stages"]["overflow"]["buffer"]}
                    at_switch |= (
                        {
                            (
                                state["stages"]["overflow"]["carry"]["group"],
                                state["stages"]["overflow"]["carry"]["cursor"][0],
                            )
                        }
                        if state["stages"]["overflow"]["carry"]
                        else set()
                    )
                    state["stages"]["pace"]["backlog"] = len(state["stages"]["overflow"]["buffer"])
                    continue
                phase_tokens += _tokens(batch) if at_switch is not None else collections.Counter()
                if draining and _backlog(state) > 0:  # the whole pack made while VLM samples waited
                    # a VLM sample goes in only while VLM stays within its pace (this pack
                    # counted at max_num_tokens): at most one sample over its target share
                    pace = TARGETS["vlm"] * (sum(phase_tokens.values()) - sum(_tokens(batch).values()) + 400)
                    assert phase_tokens["vlm"] <= pace + 60, (n, phase_tokens)
        assert at_switch is not None and _backlog(state) == 0, "the backlog did not drain"
        assert all(packed[row] == 1 for row in at_switch), "a sample waiting at the switch was lost or packed twice"
        waited.append(len(at_switch))
        waiting = collections.Counter((raw["group"], raw["cursor"][0]) for raw in state["stages"]["overflow"]["buffer"])
        waiting.update(
            [(state["stages"]["overflow"]["carry"]["group"], state["stages"]["overflow"]["carry"]["cursor"][0])]
            if state["stages"]["overflow"]["carry"]
            else []
        )
        drawn = collections.Counter((name, i) for name, group in groups.items() for i in group.drawn)
        assert packed + waiting == drawn
        assert max((packed + waiting).values()) == 1
    assert max(waited) >= 40, f"a buffer nearly full of VLM samples at the switch on some worker: {waited}"


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(
    "cut", [SWITCH // WORKERS - 1, SWITCH // WORKERS, SWITCH // WORKERS + 1, SWITCH // WORKERS + 4]
)
def test_resume_around_the_switch_gives_the_uninterrupted_stream(strategy, cut):
    """Worker 1 of rank 1 makes steps 1, 3, 5, ...: cut before, at, just after the switch
    and while the backlog drains."""
    with as_worker(1, WORKERS):
        full = [_rows(b) for b in itertools.islice(iter(_dataset(strategy, 1, 1)[0]), 30)]
        first, _ = _dataset(strategy, 1, 1)
        head = [_rows(b) for b in itertools.islice(iter(first), cut)]
        state = first.state_dict()
        resumed, _ = _dataset(strategy, 1, 1)
        resumed.load_state_dict(state)
        tail = [_rows(b) for b in itertools.islice(iter(resumed), 30 - cut)]
    assert (_backlog(state) > 0) == (cut > SWITCH // WORKERS)
    assert head + tail == full


def test_a_checkpoint_of_version_3_loads_with_no_backlog():
    with as_worker(0, WORKERS):
        first, _ = _dataset("best_fit", 0, 0)
        head = [_rows(b) for b in itertools.islice(iter(first), 3)]
        state = first.state_dict()
        stages = state.pop("stages")  # version 3 kept at the top what the stages own now, but the pacer's
        state.update(version=3, cursors=stages["draw"]["cursors"], group_tokens=stages["choose"]["group_tokens"])
        state.update(stages["overflow"])
        resumed, _ = _dataset("best_fit", 0, 0)
        resumed.load_state_dict(state)
        assert len(head) == 3 and len(list(itertools.islice(iter(resumed), 3))) == 3
        assert resumed.state_dict()["version"] == STATE_VERSION


def test_a_group_whose_weight_drops_to_0_still_drains_at_the_floor():
    """Nothing is dropped: VLM at weight 0 from the switch on packs its waiting samples at
    `DRAIN_FLOOR` of the tokens until none is left."""
    stages = {**STAGES, "vlm": [[0, 1.0], [SWITCH, 0.0]]}
    dataset, _ = _dataset("best_fit", 0, 0, stages, max_buffer_size=20)
    with as_worker(0, WORKERS):
        stream = iter(dataset)
        batches = list(itertools.islice(stream, SWITCH // WORKERS))
        waiting = len(dataset.state_dict()["stages"]["overflow"]["buffer"])
        batches += list(itertools.islice(stream, 100))
    after = sum((_tokens(b) for b in batches[SWITCH // WORKERS :]), collections.Counter())
    assert waiting >= 5, "VLM samples wait at the switch"
    assert 0 < after["vlm"] <= DRAIN_FLOOR * sum(after.values()) + 60
    assert not any(raw["group"] == "vlm" for raw in dataset.state_dict()["stages"]["overflow"]["buffer"]), (
        "every one was packed"
    )
