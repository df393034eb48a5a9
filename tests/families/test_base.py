"""What every family inherits from `families/base.py`: one pass, the per-unit walk of
`bagel-data validate`, resume and rebuild at a cursor."""

from __future__ import annotations

import itertools
import re

import pytest

from bagel_data.checkpoint.restart import GroupRestart
from bagel_data.errors import EmptyWorkerError, SkipReason
from bagel_data.families.base import DistributedIterableDataset
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.sharding import INHERITED_PHASE
from helpers.builders import solid_jpeg, write_t2i

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
    pass does: same random choices, same row keys."""
    write_t2i(tmp_path, [[[ROW] * 5], [[ROW] * 5]])
    dataset = _dataset(tmp_path, tokenizer)
    expected = _first_pass_of_the_stream(dataset, 10)
    shard, log = dataset.worker_shard(), dataset.new_skip_log()
    walked = [
        sample
        for index, unit_id in enumerate(shard.unit_ids)
        for sample in dataset.unit_samples(shard, index, int(unit_id), log)
    ]
    assert _captions(walked, tokenizer) == _captions(expected, tokenizer)
    assert [sample["row_key"] for sample in walked] == [sample["row_key"] for sample in expected]


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
