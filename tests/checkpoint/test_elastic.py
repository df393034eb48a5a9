"""Elastic restart: checkpoints of W ranks x K workers continued on W' x K'.

The guarantee checked (see `bagel_data.checkpoint.restart`): after the restart, the rows every old
worker had not yet drawn in its pass in progress, and the samples the old workers held in
their buffers, are each packed exactly once before any new full pass begins; rows already
packed are not packed again before then.

The expected leftovers are computed independently of `restart.py`: each old worker's group
stream is replayed from its beginning, up to its checkpointed cursor, and on to the end of
its pass in progress. Workers are emulated in one process (`as_worker`), so the test can
see which rows were packed; one test runs the old topology through real DataLoader workers.
"""

from __future__ import annotations

import collections
import copy
import itertools

import pytest

from bagel_data import ResumeError, build_dataloader, make_bagel_multimodal_dataset
from bagel_data.batch import SimpleCustomBatch
from bagel_data.checkpoint.collect import worker_dataset_states
from bagel_data.checkpoint.merge import apply_restart
from bagel_data.checkpoint.state import BufferEntry
from bagel_data.errors import SkipReason
from bagel_data.packing import packed_dataset
from bagel_data.packing.invariants import check_batch
from helpers.batches import assert_same_batch
from helpers.builders import solid_jpeg, write_edit, write_t2i, write_vlm
from helpers.golden import as_worker

TRANSFORM = {"image_stride": 16, "max_image_size": 64, "min_image_size": 32}
VIT_TRANSFORM = {"image_stride": 14, "max_image_size": 56, "min_image_size": 28}
PACKING = dict(
    expected_num_tokens=150,
    max_num_tokens=165,
    max_num_tokens_per_sample=120,
    prefer_buffer_before=40,
    max_buffer_size=3,
    text_cond_dropout_prob=0.2,
    vit_cond_dropout_prob=0.2,
    vae_cond_dropout_prob=0.2,
)

# Rows dropped by the packer rather than by the data; the leftover accounting assumes none.
PACKING_SKIPS = (SkipReason.OVER_SAMPLE_BUDGET, SkipReason.NO_ROOM_BESIDE_MANDATORY)


@pytest.fixture(scope="module")
def elastic_data(tmp_path_factory) -> tuple[dict, dict]:
    """(grouped_datasets, dataset_info) of three small groups with enough units for 3 x 2."""
    root = tmp_path_factory.mktemp("elastic")
    image = solid_jpeg(40, 48)
    t2i_files = [
        [
            [{"image": image, "captions": {"a": f"file {f} group {g} row {r}", "b": "x"}} for r in range(3)]
            for g in range(2)
        ]
        for f in range(6)
    ]
    t2i_files[2][1][1]["captions"] = "not json"  # one bad row: skipped the same way by every topology
    write_t2i(root / "t2i", t2i_files)
    chain = {"image_list": [image, solid_jpeg(48, 40), image], "instruction_list": [["turn"], ["undo", "revert"]]}
    write_edit(root / "edit", [[[chain, chain], [chain]] for _ in range(4)])
    rows = [
        {
            "image": "a.jpg",
            "conversations": [
                {"from": "human", "value": f"<image>q{i}"},
                {"from": "gpt", "value": f"a{i}" + " more" * (i % 7 * 9)},
            ],
        }
        for i in range(30)
    ]
    jsonl, images = write_vlm(root / "vlm", rows, {"a.jpg": image})
    info = {
        "t2i_pretrain": {"t2i": {"data_dir": str(root / "t2i"), "num_files": 6}},
        "unified_edit": {
            "edit": {"data_dir": str(root / "edit"), "parquet_info_path": str(root / "edit" / "parquet_info.json")}
        },
        "vlm_sft": {"vlm": {"data_dir": images, "jsonl_path": jsonl}},
    }
    groups = {
        "t2i_pretrain": {
            "dataset_names": ["t2i"],
            "image_transform_args": TRANSFORM,
            "is_mandatory": True,
            "num_used_data": [6],
            "weight": 1,
        },
        "unified_edit": {
            "dataset_names": ["edit"],
            "image_transform_args": TRANSFORM,
            "vit_image_transform_args": VIT_TRANSFORM,
            "num_used_data": [4],
            "weight": 1,
        },
        "vlm_sft": {
            "dataset_names": ["vlm"],
            "image_transform_args": VIT_TRANSFORM,
            "num_used_data": [30],
            "shuffle_lines": True,
            "weight": 2,
        },
    }
    return groups, info


def build(data, tokenizer, special_tokens, rank: int, world_size: int, num_workers: int):
    groups, info = data
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=groups,
        dataset_info=info,
        local_rank=rank,
        world_size=world_size,
        num_workers=max(num_workers, 1),
        data_seed=11,
        **PACKING,
    )


class Packed(list):
    """(group, row key) of each packed sample; `indexes` holds their `data_indexes`."""

    def __init__(self):
        super().__init__()
        self.indexes: list = []

    def clear(self):
        super().clear()
        self.indexes.clear()


def by_rows(family) -> bool:
    """Whether the family walks rows (the default mode's equal shares, families/row_plan.py)."""
    return family.worker_shard().rows is not None


def furthest_rounds(states: list) -> dict:
    """The furthest round any old worker had begun, per group (-1: none)."""
    return {
        name: max(
            (
                s["stages"]["draw"]["cursors"][name][0]
                for s in states
                if s["stages"]["draw"]["cursors"][name] is not None
            ),
            default=-1,
        )
        for name in states[0]["stages"]["draw"]["cursors"]
    }


@pytest.fixture
def packed_rows(monkeypatch) -> list:
    """Every sample added to a pack in this process, as (group, row key)."""
    added = Packed()
    original = packed_dataset.PackBuilder.add

    def add(self, sample, dropped=None):
        added.append((sample["data_indexes"]["dataset_name"], sample["row_key"]))
        added.indexes.append(sample["data_indexes"]["data_indexes"])
        return original(self, sample, dropped)

    monkeypatch.setattr(packed_dataset.PackBuilder, "add", add)
    return added


def run_worker(dataset, worker_id: int, num_workers: int, batches: int) -> tuple[list, dict]:
    """`batches` packs of one (emulated) worker, and its checkpoint after them."""
    with as_worker(worker_id if num_workers else None, num_workers):
        stream = iter(dataset)
        out = list(itertools.islice(stream, batches))
        return out, dataset.state_dict()


def leftover_rows(data, tokenizer, special_tokens, state: dict, furthest: dict) -> collections.Counter:
    """(group, row key) of every row a worker had not drawn in its pass in progress, found by
    replaying its group streams from the beginning; plus the samples it held. In the walk by
    rows a pass is a round, and a worker behind leaves its rounds up to the `furthest` one
    any old worker had begun (every stream position is drawn once)."""
    top = state["topology"]
    dataset = build(data, tokenizer, special_tokens, top["rank"], top["world_size"], top["num_workers"])
    apply_restart(dataset, state["restart"])
    left = collections.Counter()
    with as_worker(top["worker_id"] if top["num_workers"] else None, top["num_workers"]):
        for name, family in zip(dataset.group_names, dataset.grouped_datasets):
            cursor = state["stages"]["draw"]["cursors"][name]
            plan = family.restart_plan
            limit = cursor[0] if cursor is not None and cursor[0] >= 0 else (-1 if plan else 0)
            if by_rows(family):
                limit = furthest[name]
            reached = cursor is None
            for found, sample in family.iter_samples():
                if found[0] > limit and found[0] >= 0:
                    break
                if reached:
                    left[name, sample["row_key"]] += 1
                reached = reached or list(found) == cursor
            held = ([state["stages"]["overflow"]["carry"]] if state["stages"]["overflow"]["carry"] else []) + state[
                "stages"
            ]["overflow"]["buffer"]
            for entry in (BufferEntry.read(raw) for raw in held):
                group, held_cursor = entry.group, entry.cursor
                if group == name:
                    left[name, family.row_key(tuple(held_cursor))] += 1
    return left


def run_old(
    data, tokenizer, special_tokens, world_size: int, num_workers: int, packed_rows, base: int = 5
) -> tuple[list, set]:
    """Each old worker runs a different number of packs; (their checkpoints, rows packed)."""
    states = []
    for rank in range(world_size):
        for worker in range(max(num_workers, 1)):
            dataset = build(data, tokenizer, special_tokens, rank, world_size, num_workers)
            _, state = run_worker(dataset, worker, num_workers, batches=base + 2 * rank + 3 * worker)
            states.append(state)
    return states, set(packed_rows)


def run_new(data, tokenizer, special_tokens, states, world_size: int, num_workers: int, packed_rows):
    """Restart on the new topology; run every new worker until its groups left the
    pre-pass phases. Returns (new checkpoints, rows packed per pass kind, merged plan)."""
    packed_rows.clear()
    new_states, merged = [], None
    for rank in range(world_size):
        for worker in range(max(num_workers, 1)):
            dataset = build(data, tokenizer, special_tokens, rank, world_size, num_workers)
            merged = dataset.load_elastic_state(states)
            with as_worker(worker if num_workers else None, num_workers):
                stream = iter(dataset)
                for _ in range(80):
                    check_batch(next(stream), dataset.config, dataset.special_tokens)
                    state = dataset.state_dict()
                    pending = [c for c in state["stages"]["draw"]["cursors"].values() if c is None or c[0] < 0]
                    held = state["stages"]["overflow"]["buffer"] + (
                        [state["stages"]["overflow"]["carry"]] if state["stages"]["overflow"]["carry"] else []
                    )
                    if not pending and all(BufferEntry.read(raw).cursor[0] >= 0 for raw in held):
                        break
                else:
                    pytest.fail(f"new rank {rank} worker {worker} never finished its inherited rows")
            new_states.append(state)
            for counts in state["skips"].values():
                dropped = {reason: counts.get(reason.value) for reason in PACKING_SKIPS if counts.get(reason.value)}
                assert not dropped, f"the test data should not overflow the budgets: {dropped}"
    first_pass = {name: plan["first_pass"] for name, plan in merged["restart"]["groups"].items()}
    rows = {name: by_rows(family) for name, family in zip(dataset.group_names, dataset.grouped_datasets)}
    before = collections.Counter(
        row
        for row, index in zip(packed_rows, packed_rows.indexes)
        if (index[0] < 0 if rows[row[0]] else row[1][1] < first_pass[row[0]])
    )
    return new_states, before, merged


@pytest.mark.parametrize(
    "old, new, passes_differ",
    [
        ((1, 0), (2, 0), False),
        ((2, 0), (3, 0), True),  # packs hold more rows since CFG dropout is known when drawn
        ((3, 0), (2, 0), True),
        ((1, 2), (1, 1), True),
        ((2, 2), (3, 1), True),
    ],
    ids=["W1to2", "W2to3", "W3to2", "K2to1", "W2K2toW3K1"],
)
def test_every_unread_row_and_buffered_sample_is_packed_once(
    elastic_data, tokenizer, special_tokens, packed_rows, old, new, passes_differ
):
    states, packed_before = run_old(elastic_data, tokenizer, special_tokens, *old, packed_rows)
    assert any(state["stages"]["overflow"]["buffer"] or state["stages"]["overflow"]["carry"] for state in states), (
        "no old worker held a sample"
    )
    # Workers with fewer units wrap sooner: old workers in different passes are covered too.
    passes = {cursor[0] for state in states for cursor in state["stages"]["draw"]["cursors"].values() if cursor}
    assert (len(passes) > 1) == passes_differ
    expected = collections.Counter()
    for state in states:
        expected += leftover_rows(elastic_data, tokenizer, special_tokens, state, furthest_rounds(states))
    _, packed_after, merged = run_new(elastic_data, tokenizer, special_tokens, states, *new, packed_rows)
    assert packed_after == expected
    assert not set(packed_after) & packed_before, "a row packed before the restart was packed again"
    assert merged["from_topology"] == {"world_size": old[0], "num_workers": old[1]}
    assert merged["history"]["packs"] == sum(state["packs"] for state in states)
    assert merged["history"]["tokens"] == sum(state["tokens"] for state in states)


@pytest.fixture(scope="module")
def tar_elastic_data(elastic_data, tmp_path_factory) -> tuple[dict, dict]:
    """`elastic_data` with the T2I group read from WebDataset tars in place (one key without
    a caption: skipped the same way by every topology)."""
    import io
    import tarfile

    folder = tmp_path_factory.mktemp("tars")
    image = solid_jpeg(40, 48)
    for f in range(6):
        with tarfile.open(folder / f"{f:05d}.tar", "w") as archive:
            for r in range(6):
                parts = [("jpg", image)] + ([] if (f, r) == (2, 4) else [("txt", f"file {f} row {r}\nx".encode())])
                for ext, data in parts:
                    info = tarfile.TarInfo(f"{f}/{r:04d}.{ext}")
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))
    groups, info = elastic_data
    info = {**info, "t2i_pretrain": {"t2i": {"data_dir": str(folder), "num_files": 6}}}
    return groups, info


def test_tar_shards_restart_elastically(tar_elastic_data, tokenizer, special_tokens, packed_rows, monkeypatch):
    """Units that are tars (rows: block, sample within it) keep the guarantee: W2K2 -> W3K1."""
    from bagel_data.sources import tar_index

    monkeypatch.setattr(tar_index, "BLOCK_BYTES", 4096)  # a few blocks per tar
    states, packed_before = run_old(tar_elastic_data, tokenizer, special_tokens, 2, 2, packed_rows)
    assert any(len(key) == 4 and key[3] > 0 for _, key in packed_before), packed_before
    expected = collections.Counter()
    for state in states:
        expected += leftover_rows(tar_elastic_data, tokenizer, special_tokens, state, furthest_rounds(states))
    assert any(len(key) == 4 for _, key in expected), "T2I rows left to the new workers"
    _, packed_after, _ = run_new(tar_elastic_data, tokenizer, special_tokens, states, 3, 1, packed_rows)
    assert packed_after == expected
    assert not set(packed_after) & packed_before, "a row packed before the restart was packed again"


def test_a_worker_that_had_not_started_leaves_every_row_to_the_new_workers(
    elastic_data, tokenizer, special_tokens, packed_rows
):
    """A checkpoint taken before a worker's first batch (no cursor in any group) hands its
    whole share on, once; the restart after it then hands on what is still unread."""
    states = []
    for rank, batches in ((0, 0), (1, 4)):
        dataset = build(elastic_data, tokenizer, special_tokens, rank, 2, 0)
        states.append(run_worker(dataset, 0, 0, batches=batches)[1])
    assert all(cursor is None for cursor in states[0]["stages"]["draw"]["cursors"].values())
    expected = leftover_rows(elastic_data, tokenizer, special_tokens, states[0], furthest_rounds(states))
    expected += leftover_rows(elastic_data, tokenizer, special_tokens, states[1], furthest_rounds(states))
    _, packed_after, _ = run_new(elastic_data, tokenizer, special_tokens, states, 3, 0, packed_rows)
    assert packed_after == expected
    # Restarted, a new worker checkpointed before its first batch again leaves all it inherited.
    middle = []
    for rank in range(3):
        dataset = build(elastic_data, tokenizer, special_tokens, rank, 3, 0)
        dataset.load_elastic_state(states)
        middle.append(run_worker(dataset, 0, 0, batches=rank)[1])
    expected = collections.Counter()
    for state in middle:
        expected += leftover_rows(elastic_data, tokenizer, special_tokens, state, furthest_rounds(middle))
    _, packed_after, _ = run_new(elastic_data, tokenizer, special_tokens, middle, 2, 0, packed_rows)
    assert packed_after == expected


def test_a_restarted_run_can_restart_again(elastic_data, tokenizer, special_tokens, packed_rows):
    states, _ = run_old(elastic_data, tokenizer, special_tokens, 2, 0, packed_rows)
    # Stop the 3-rank run part-way through its inherited and remainder rows this time.
    middle = []
    for rank in range(3):
        dataset = build(elastic_data, tokenizer, special_tokens, rank, 3, 0)
        dataset.load_elastic_state(states)
        middle.append(run_worker(dataset, 0, 0, batches=1 + rank)[1])
    assert any(c is not None and c[0] < 0 for state in middle for c in state["stages"]["draw"]["cursors"].values())
    expected = collections.Counter()
    for state in middle:
        expected += leftover_rows(elastic_data, tokenizer, special_tokens, state, furthest_rounds(middle))
    _, packed_after, merged = run_new(elastic_data, tokenizer, special_tokens, middle, 2, 0, packed_rows)
    assert packed_after == expected
    assert merged["restart"]["generation"] == 2


def test_exact_resume_after_an_elastic_restart(elastic_data, tokenizer, special_tokens, packed_rows):
    states, _ = run_old(elastic_data, tokenizer, special_tokens, 2, 0, packed_rows)

    def restarted():
        dataset = build(elastic_data, tokenizer, special_tokens, 1, 3, 0)
        dataset.load_elastic_state(states)
        return dataset

    reference = list(itertools.islice(iter(restarted()), 6))
    first = restarted()
    stream = iter(first)
    for _ in range(2):
        next(stream)
    checkpoint = first.state_dict()
    assert checkpoint["restart"] is not None
    resumed = build(elastic_data, tokenizer, special_tokens, 1, 3, 0)
    resumed.load_state_dict(checkpoint)
    got = list(itertools.islice(iter(resumed), 4))
    for index, (batch, want) in enumerate(zip(got, reference[2:])):
        assert_same_batch(SimpleCustomBatch([batch]), SimpleCustomBatch([want]), f"batch {index + 2}")


def test_old_topology_through_real_dataloader_workers(elastic_data, tokenizer, special_tokens, packed_rows):
    """K 2 -> 1 with the old checkpoint taken from a StatefulDataLoader with two workers."""
    old = build(elastic_data, tokenizer, special_tokens, 0, 1, 2)
    loader = build_dataloader(old, num_workers=2)
    list(itertools.islice(loader, 7))
    states = worker_dataset_states(loader.state_dict())
    assert sorted(state["topology"]["worker_id"] for state in states) == [0, 1]
    expected = collections.Counter()
    for state in states:
        expected += leftover_rows(elastic_data, tokenizer, special_tokens, state, furthest_rounds(states))
    _, packed_after, _ = run_new(elastic_data, tokenizer, special_tokens, states, 1, 1, packed_rows)
    assert packed_after == expected
    # The same restart through a real one-worker loader gives the same packs.
    emulated = build(elastic_data, tokenizer, special_tokens, 0, 1, 1)
    emulated.load_elastic_state(states)
    want, _ = run_worker(emulated, 0, 1, batches=4)
    real = build(elastic_data, tokenizer, special_tokens, 0, 1, 1)
    real.load_elastic_state(states)
    got = list(itertools.islice(build_dataloader(real, num_workers=1), len(want)))
    for index, (batch, expected_batch) in enumerate(zip(got, want)):
        assert_same_batch(batch, SimpleCustomBatch([expected_batch]), f"batch {index}")


def test_incomplete_or_mixed_checkpoints_are_refused(elastic_data, tokenizer, special_tokens, packed_rows):
    states, _ = run_old(elastic_data, tokenizer, special_tokens, 2, 0, packed_rows)
    dataset = build(elastic_data, tokenizer, special_tokens, 0, 3, 0)
    with pytest.raises(ResumeError, match=r"missing \(rank, worker\) \[\(1, 0\)\]"):
        dataset.load_elastic_state(states[:1])
    with pytest.raises(ResumeError, match=r"given twice \[\(0, 0\)\]"):
        dataset.load_elastic_state([states[0], states[0], states[1]])
    other_seed = dict(states[1], data_seed=12)
    with pytest.raises(ResumeError, match="data_seed=12"):
        dataset.load_elastic_state([states[0], other_seed])
    merged = dataset.load_elastic_state(states)
    with pytest.raises(ResumeError, match="not an elastic checkpoint"):
        dataset.load_elastic_state([merged])
    fewer_units = dict(elastic_data[0], vlm_sft=dict(elastic_data[0]["vlm_sft"], num_used_data=[20]))
    smaller = make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=fewer_units,
        dataset_info=elastic_data[1],
        num_workers=1,
        data_seed=11,
        **PACKING,
    )
    with pytest.raises(ResumeError, match="vlm_sft: the checkpoint was taken with 30 units, the dataset now has 20"):
        smaller.load_state_dict(merged)
        next(iter(smaller))


def _as_version_5(state: dict) -> dict:
    """`state` as version 5 wrote it: the cursors, the buffer and the carry at the top."""
    old = copy.deepcopy(state)
    stages = old["stages"]
    old.update(version=5, cursors=stages.pop("draw")["cursors"], **stages.pop("overflow"))
    return old


def test_the_merge_reads_each_stages_part_and_older_versions_alike(
    elastic_data, tokenizer, special_tokens, packed_rows
):
    """The merge reads the cursors, buffer and carry under `stages` (version 6), and a
    version-5 checkpoint of the same workers (at the top) gives the same plan; a worker's
    malformed part is a ResumeError naming it, not a KeyError."""
    states, _ = run_old(elastic_data, tokenizer, special_tokens, 2, 0, packed_rows)
    assert any(state["stages"]["overflow"]["buffer"] for state in states), "no old worker held a sample"
    dataset = build(elastic_data, tokenizer, special_tokens, 0, 3, 0)
    merged = dataset.load_elastic_state(copy.deepcopy(states))
    assert merged["version"] == 6
    assert dataset.load_elastic_state([_as_version_5(state) for state in states]) == merged
    mixed = [_as_version_5(states[0]), states[1]]  # one old worker's from before the upgrade
    assert dataset.load_elastic_state(mixed) == merged
    no_cursors = copy.deepcopy(states)
    del no_cursors[1]["stages"]["draw"]
    with pytest.raises(ResumeError, match="stages.draw.cursors is missing"):
        dataset.load_elastic_state(no_cursors)
    bad_carry = copy.deepcopy(states)
    bad_carry[0]["stages"]["overflow"]["carry"] = ["no_such_group", [0, 0]]
    with pytest.raises(ResumeError, match="stages.overflow.carry .*unknown group"):
        dataset.load_elastic_state(bad_carry)


def test_plain_checkpoint_into_another_topology_points_to_the_elastic_path(elastic_data, tokenizer, special_tokens):
    dataset = build(elastic_data, tokenizer, special_tokens, 0, 2, 0)
    _, state = run_worker(dataset, 0, 0, batches=1)
    other = build(elastic_data, tokenizer, special_tokens, 0, 3, 0)
    other.load_state_dict(state)
    with pytest.raises(ResumeError, match="load_elastic_state"):
        next(iter(other))


def test_an_inherited_row_that_no_longer_exists_is_a_clear_error(elastic_data, tokenizer, special_tokens, packed_rows):
    states, _ = run_old(elastic_data, tokenizer, special_tokens, 2, 0, packed_rows)
    dataset = build(elastic_data, tokenizer, special_tokens, 0, 1, 0)
    merged = dataset.load_elastic_state(states)
    group, plan = next((name, plan) for name, plan in merged["restart"]["groups"].items() if plan["inherited"])
    unit, pass_index, *row = plan["inherited"][0]
    plan["inherited"][0] = [unit, pass_index, *row[:-1], 999]  # a row past the end of its unit
    dataset.load_state_dict(merged)
    with pytest.raises(ResumeError, match=f"{group}: the buffered row"):
        list(itertools.islice(iter(dataset), 5))


def test_an_elastic_restart_across_a_change_point_packs_every_waiting_sample_once(
    elastic_data, tokenizer, special_tokens, packed_rows, monkeypatch
):
    """Old run (2 ranks x 2 workers) past a change at step 2, best fit and mix_by tokens:
    the backlogs the old workers held are inherited rows of the new run (1 rank x 2
    workers), each packed exactly once; the schedule goes on from the step reached."""
    groups, info = elastic_data
    staged = copy.deepcopy(groups)
    staged["vlm_sft"]["weight"] = [[0, 2], [2, 0.5]]
    staged["unified_edit"]["weight"] = [[0, 0], [2, 2]]
    data = (staged, info)
    monkeypatch.setitem(PACKING, "mix_by", "tokens")
    monkeypatch.setitem(PACKING, "pack_strategy", "best_fit")
    states, packed_before = run_old(data, tokenizer, special_tokens, 2, 2, packed_rows, base=3)
    assert any(state["stages"]["pace"]["backlog"] for state in states), "no old worker held a backlog at the restart"
    expected = collections.Counter()
    for state in states:
        expected += leftover_rows(data, tokenizer, special_tokens, state, furthest_rounds(states))
    _, packed_after, merged = run_new(data, tokenizer, special_tokens, states, 1, 2, packed_rows)
    assert packed_after == expected
    assert not set(packed_after) & packed_before, "a row packed before the restart was packed again"
    assert merged["history"]["steps"] == 13  # rank 1's workers made 5 + 8 packs: its step
