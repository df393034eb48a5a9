"""What every family inherits from `families/base.py`: one pass, the per-unit walk of
`bagel-data validate`, resume and rebuild at a cursor."""

from __future__ import annotations

import itertools
import re

import pytest

from bagel_data.checkpoint.restart import GroupRestart
from bagel_data.errors import EmptyWorkerError, SkipReason, TooManyFailuresError
from bagel_data.families.base import DistributedIterableDataset
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.sharding import INHERITED_PHASE
from helpers.builders import solid_jpeg, write_t2i
from helpers.golden import as_worker

TRANSFORM = ImageTransform(32, 16, 16)
# Eight captions: each pass draws one per row, so two passes rarely agree.
ROW = {"image": solid_jpeg(16, 16), "captions": {f"k{i}": f"caption {i}" for i in range(8)}}


def _dataset(folder, tokenizer) -> T2IIterableDataset:
    return T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(folder)], [2], num_workers=1)


def _captions(samples, tokenizer) -> list[str]:
    return [tokenizer.decode(sample["text_ids_list"][0]) for sample in samples]


def _first_pass_of_the_stream(dataset, rows: int) -> list[dict]:
    """The stream's first `rows` samples, checked to be its pass 0."""
    streamed = list(itertools.islice(dataset.iter_samples(), rows))
    assert {cursor[0] for cursor, _ in streamed} == {0}
    return [sample for _, sample in streamed]


def test_one_pass_is_the_stream_s_first_pass(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[ROW] * 5], [[ROW] * 5]])
    dataset = _dataset(tmp_path, tokenizer)
    expected = _captions(_first_pass_of_the_stream(dataset, 10), tokenizer)
    one_pass = [sample for _, sample in dataset.iter_pass(dataset.new_skip_log())]
    assert _captions(one_pass, tokenizer) == expected


def test_the_per_unit_walk_gives_the_stream_s_first_pass(tmp_path, tokenizer):
    """`unit_samples` (what `bagel-data validate` measures) builds the rows as the first
    pass does: same random choices, same row keys (the pass shuffles their order)."""
    write_t2i(tmp_path, [[[ROW] * 5], [[ROW] * 5]])
    dataset = _dataset(tmp_path, tokenizer)
    expected = _first_pass_of_the_stream(dataset, 10)
    shard, log = dataset.worker_shard(), dataset.new_skip_log()
    walked = [
        sample
        for index, unit_id in enumerate(shard.unit_ids)
        for sample in dataset.unit_samples(shard, index, int(unit_id), log)
    ]

    def by_row(samples):
        return sorted(zip((s["row_key"] for s in samples), _captions(samples, tokenizer)))

    assert by_row(walked) == by_row(expected)
    assert len({sample["row_key"] for sample in expected}) == 10


def test_an_inherited_row_that_went_bad_since_is_a_counted_skip(tmp_path, tokenizer):
    """After an elastic restart a worker first reads the rows the old workers had buffered;
    one that gives no sample now (its caption broke) is skipped and counted, not an error."""
    write_t2i(tmp_path, [[[{"image": ROW["image"], "captions": "not json"}, ROW]]])
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1], num_workers=1)
    dataset.restart_plan = GroupRestart(first_pass=1, segments=(), inherited=((0, 0, 0, 0), (0, 0, 0, 1)))
    log = dataset.new_skip_log()
    cursor, _ = next(dataset.iter_samples(log=log))
    assert cursor == (INHERITED_PHASE, 1)
    assert log.as_dict() == {SkipReason.CAPTION_INVALID.value: 1}


class EmptyUnits(DistributedIterableDataset):
    """A family whose units have no rows; it records the (unit, pass) it is asked to read."""

    def __init__(self, num_units: int):
        super().__init__("empty", num_workers=1)
        self.data_paths = [f"unit-{i}" for i in range(num_units)]
        self.data_status = None
        self.asked: list[tuple[int, int]] = []
        self.set_epoch()

    def _unit_samples(self, unit_id, pass_index, start, log, single=False):
        self.asked.append((unit_id, pass_index))
        return iter(())


def test_an_empty_worker_raises_after_one_pass_over_its_units():
    family = EmptyUnits(3)
    with pytest.raises(EmptyWorkerError):
        next(family.iter_samples())
    assert sorted(family.asked) == [(0, 0), (1, 0), (2, 0)]


@pytest.mark.parametrize("num_units, rest", [(5, ")"), (6, " and 1 more)"), (7, " and 2 more)")])
def test_the_empty_pass_error_names_at_most_five_units_and_counts_the_rest(num_units, rest):
    with pytest.raises(EmptyWorkerError) as caught:
        next(EmptyUnits(num_units).iter_samples())
    message = str(caught.value)
    assert f"its {num_units} unit(s)" in message
    assert re.search(r"\(unit-\d(, unit-\d){4}" + re.escape(rest), message), message


def test_row_random_hands_back_the_compat_state_before_the_row_and_sets_nothing(tmp_path, tokenizer):
    """compat="bagel": a row's draws come from the shared stream, and the state before them
    (what rebuilds a buffered sample) is returned with the generator, not left on the family."""
    write_t2i(tmp_path, [[[ROW, ROW]]])
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1], num_workers=1, compat="bagel")
    stream = dataset.policy.start_stream(3)
    stream.integers(1000)  # an earlier row's draw
    attributes = set(vars(dataset))
    draw = dataset.units.row_random(0, 0, 0, 1)
    first = [draw.rng.integers(1000) for _ in range(3)]
    assert set(vars(dataset)) == attributes
    with dataset.policy.stream.replaying(draw.state) as replayed:
        assert [replayed.integers(1000) for _ in range(3)] == first
    assert dataset.units.row_random(0, 0, 0, 1).state != draw.state  # the stream moved on: a new state
    default = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1], num_workers=1)
    assert default.units.row_random(0, 0, 0, 1).state is None


class BadUnits(EmptyUnits):
    """A family whose every row is bad: each unit's one row is a counted skip."""

    def _unit_samples(self, unit_id, pass_index, start, log, single=False):
        self.asked.append((unit_id, pass_index))
        log.skip(SkipReason.SCHEMA, f"unit-{unit_id}", "bad")
        return iter(())


def test_a_worker_of_only_bad_rows_runs_into_the_failure_bound_not_the_empty_error():
    """Its rows are there but bad: counted, pass after pass, until the failure bound says
    so (the empty-worker error is for units that hold no rows at all)."""
    family = BadUnits(3)
    family.max_consecutive_failures = 4
    with pytest.raises(TooManyFailuresError):
        next(family.iter_samples(log=family.new_skip_log()))
    assert family.asked[:4] == [(unit, 0) for unit, _ in family.asked[:3]] + [(family.asked[3][0], 1)]


def test_a_new_skip_log_keeps_the_family_s_failure_bound():
    family = EmptyUnits(1)
    family.max_consecutive_failures = 7
    assert family.new_skip_log().max_consecutive_failures == 7


def test_a_rebuild_without_a_log_counts_its_skip_apart_from_the_stream_s(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[{"image": ROW["image"], "captions": "not json"}, ROW]]])
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1], num_workers=1)
    log = dataset.new_skip_log()
    cursor, _ = next(dataset.iter_samples(log=log))
    assert log.as_dict() == {SkipReason.CAPTION_INVALID.value: 1}
    assert dataset.sample_at((*cursor[:-1], cursor[-1] - 1)) is None  # the bad row, rebuilt
    assert log.as_dict() == {SkipReason.CAPTION_INVALID.value: 1}  # the stream's count unchanged


def test_a_compat_group_continues_the_shared_stream_it_is_handed(tmp_path, tokenizer):
    """The packer starts compat's one stream and every group draws from it: a group's
    iteration must not start it again (each group would repeat the others' draws)."""
    write_t2i(tmp_path, [[[ROW] * 3]])
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1], num_workers=1, compat="bagel")
    stream = dataset.policy.start_stream(dataset.units.epoch_seed)
    next(dataset.iter_samples())
    assert dataset.policy.stream.rng is stream


def test_num_files_per_rank_and_row_locations(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[ROW]], [[ROW]], [[ROW]], [[ROW]]])
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [4], 1, 2, num_workers=1)
    assert dataset.num_files_per_rank == 2 == len(dataset.data_paths_per_rank)
    unit = dataset.units.unit(3)
    assert dataset.row_location((3, 5, 0, 1)) == dataset.units.kind.location(unit, (0, 1))  # pass 5 not in it


def test_media_folders_on_a_store_make_a_local_group_remote(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[ROW]]])
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1], num_workers=1)
    remote = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1], num_workers=1)
    remote.media_folders = lambda: ["s3://bucket/images"]  # type: ignore[method-assign]
    assert dataset.reads_remote() is False and remote.reads_remote() is True


def test_each_worker_resumes_at_its_own_data_status_entry(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[ROW] * 4] for _ in range(4)])

    def rows(worker, status=None, count=6):
        dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [4], 0, 1, 2, status)
        with as_worker(worker, 2):
            return [s["data_indexes"]["data_indexes"] for s in itertools.islice(iter(dataset), count)]

    first, second = rows(0), rows(1)
    assert rows(1, {0: first[1], 1: second[3]}, 2) == second[4:6]
    assert rows(0, {0: first[1], 1: second[3]}, 2) == first[2:4]


def test_the_per_unit_walk_positions_name_the_worker_s_items(tmp_path, tokenizer, monkeypatch):
    """Walked by units, a position starts with the unit's index in the worker's list (what a
    resume reads), not its global id: worker 1 of 2 reads units 1 and 3 as its items 0 and 1."""
    from bagel_data.families.unit_plan import UnitPlan

    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)
    write_t2i(tmp_path, [[[ROW] * 2] for _ in range(4)])
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [4], num_workers=2)
    with as_worker(1, 2):
        shard, log = dataset.worker_shard(), dataset.new_skip_log()
        streamed = [s for _, s in itertools.islice(dataset.iter_samples(), 4)]
    assert sorted(int(unit) for unit in shard.unit_ids) != list(range(len(shard.unit_ids)))
    walked = [
        sample
        for index, unit_id in enumerate(shard.unit_ids)
        for sample in dataset.unit_samples(shard, index, int(unit_id), log)
    ]
    assert sorted(str(s["data_indexes"]) for s in walked) == sorted(str(s["data_indexes"]) for s in streamed)


def test_a_family_s_image_formats_widen_its_decodes(tmp_path, tokenizer):
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buffer, "PPM")
    write_t2i(tmp_path, [[[ROW]]])
    dataset = T2IIterableDataset(
        "t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1], num_workers=1, image_formats=["JPEG", "PNG", "PPM"]
    )
    assert dataset.media.decode(buffer.getvalue()).getpixel((0, 0)) == (200, 10, 10)
