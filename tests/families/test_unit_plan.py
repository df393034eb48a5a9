"""A family's held unit plan and unit kinds (`families/unit_plan.py`, `families/unit_kinds.py`)."""

from __future__ import annotations

import pytest

from bagel_data.checkpoint.restart import GroupRestart
from bagel_data.compat import CompatPolicy
from bagel_data.compat.streams import CompatRandom, SeededRandom, as_random_source
from bagel_data.errors import ConfigError
from bagel_data.families.edit import UnifiedEditIterableDataset
from bagel_data.families.unit_kinds import Listed, ParquetFiles, ParquetRowGroups, Span
from bagel_data.families.unit_plan import UnitPlan
from bagel_data.families.worst_case import _ForcedFrameCount
from bagel_data.media.images import ImageTransform
from bagel_data.media.video import FrameSampler
from bagel_data.sharding import INHERITED_PHASE
from helpers.builders import png_bytes, write_edit

IMAGES = [png_bytes(32, 32, (g, g, g)) for g in (30, 130)]
ROW = {"image_list": IMAGES, "instruction_list": [["go"]]}


def _plan(num_units: int, rank: int = 0, world_size: int = 1, num_workers: int = 1, mode=None) -> UnitPlan:
    plan = UnitPlan("g", rank, world_size, num_workers, CompatPolicy.of(mode))
    plan.data_paths = [f"f{i:02d}" for i in range(num_units)]
    plan.set_epoch(7)
    return plan


@pytest.mark.parametrize("num_units", [9, 10, 11])
def test_the_ranks_shares_cover_every_unit_once_in_the_default_mode(num_units):
    """Off by one at a share's edge would drop or repeat a unit: the default mode reads the
    remainder too, so the ranks' shares are the epoch order, each unit once."""
    shares = [_plan(num_units, rank, 3).rank_units() for rank in range(3)]
    assert sorted(unit for share in shares for unit in share) == sorted(_plan(num_units).data_paths)
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_compat_drops_the_remainder_as_the_reference_does():
    shares = [_plan(11, rank, 3, mode="bagel").rank_units() for rank in range(3)]
    assert [len(share) for share in shares] == [3, 3, 3]
    epoch = _plan(11, 0, 3, mode="bagel").epoch_units
    assert [unit for share in shares for unit in share] == list(epoch[:9])


def test_too_few_units_for_the_workers_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"g\.num_used_data"):
        _plan(3, 0, 2, num_workers=2)
    _plan(4, 0, 2, num_workers=2)  # exactly enough


def test_a_row_generator_is_a_seeded_random_source_of_its_own_address():
    plan = _plan(4)
    rng = plan.row_random(1, 0, 2).rng
    assert isinstance(rng, SeededRandom) and plan.row_random(1, 0, 2).state is None
    same, other = plan.sample_rng(1, 0, 2), plan.sample_rng(1, 0, 3)
    assert rng.integers(0, 2**62) == same.integers(0, 2**62) != other.integers(0, 2**62)
    assert as_random_source(rng) is rng  # one protocol: never wrapped again


def test_compat_rows_draw_from_the_shared_stream():
    plan = _plan(4, mode="bagel")
    plan.policy.start_stream(3)
    draw = plan.row_random(0, 0)
    assert isinstance(draw.rng, CompatRandom) and draw.state == draw.rng.get_state()


def test_a_forced_frame_count_reaches_the_frame_sampler():
    """validate measures a video row at each frame count it may draw: the count must be the
    forced one, not a draw of the row's generator."""
    sampler = FrameSampler(max_num_frames=1000, min_num_frames=1)
    forced = _ForcedFrameCount(537, _plan(1).sample_rng(0, 0))
    assert [sampler._draw_count(forced) for _ in range(3)] == [537] * 3


def test_the_family_s_restart_plan_is_the_plan_s_and_its_walk_starts_with_it(tmp_path, tokenizer):
    _, info = write_edit(tmp_path, [[[ROW] * 4]])
    family = UnifiedEditIterableDataset(
        "edit", ImageTransform(32, 16, 16), tokenizer, ImageTransform(28, 14, 14), [str(tmp_path)], [1], info,
        num_workers=1,
    )  # fmt: skip
    restart = GroupRestart(first_pass=1, segments=(), inherited=((0, 0, 2),))
    family.restart_plan = restart
    assert family.units.restart_plan is restart
    cursor, sample = next(family.iter_samples())
    assert cursor[0] == INHERITED_PHASE and sample["row_key"] == (0, 0, 2)


# -- unit kinds ------------------------------------------------------------------------------
def test_a_span_bounds_the_rows_it_covers():
    assert Span("a", 0).rows(5) == range(0, 5)
    assert Span("a", 0, 2, 4).rows(10) == range(2, 4)
    assert Span("a", 0, 2, 40).rows(10) == range(2, 10)  # never past the row group
    assert Span("a", 0, 2, 4).rows(10, first=3) == range(3, 4)


def test_a_row_group_unit_may_be_part_of_its_row_group(tmp_path, tokenizer):
    """A unit below the row group, `(path, row group, start, stop)`, reads only its rows and
    says so in its extent: what sampling's smaller units need from the kinds."""
    paths, info = write_edit(tmp_path, [[[ROW] * 6]])
    family = UnifiedEditIterableDataset(
        "edit", ImageTransform(32, 16, 16), tokenizer, ImageTransform(28, 14, 14), [str(tmp_path)], [1], info,
        num_workers=1,
    )  # fmt: skip
    family.data_paths = [(paths[0], 0, 1, 3), (paths[0], 0, 3, 6)]
    family.set_epoch(0)
    kind = family.units.kind
    assert isinstance(kind, ParquetRowGroups) and kind.span(family.data_paths[0]) == Span(paths[0], 0, 1, 3)
    rows = {}
    for unit_id, unit in enumerate(family.epoch_units):
        samples = family.unit_samples(family.worker_shard(), unit_id, unit_id, family.new_skip_log())
        rows[unit] = [sample["row_key"][2:] for sample in samples]
        assert kind.extent(unit, ())[1] == unit[3]
    assert rows == {(paths[0], 0, 1, 3): [(1,), (2,)], (paths[0], 0, 3, 6): [(3,), (4,), (5,)]}


def test_kinds_name_their_rows_where_messages_show_them():
    assert ParquetRowGroups().location(("a.parquet", 2), (5,)) == "a.parquet, row group 2, row 5"
    assert ParquetFiles().location("a.parquet", (2, 5)) == "a.parquet, row group 2, row 5"
    assert Listed(depth=0).depth == 0 and Listed().depth is None
    assert list(Listed().sorted_units(["b", "a"])) == ["a", "b"]


def test_units_replaced_by_as_many_others_are_ordered_anew():
    """The epoch order is made once per (seed, units): a family that lists its units again
    (another folder of as many files) gets the new units in order, not the old ones."""
    plan = _plan(4)
    assert sorted(plan.epoch_units) == ["f00", "f01", "f02", "f03"]
    plan.data_paths = [f"g{i:02d}" for i in range(4)]
    assert sorted(plan.epoch_units) == ["g00", "g01", "g02", "g03"]


def test_a_row_s_generator_is_keyed_by_its_group_and_the_whole_seed():
    """Two groups' rows at the same address, or one row under two seeds equal in their low
    32 bits, make different choices; the same key again, the same."""

    def draws(name="g", seed=5):
        plan = UnitPlan(name, 0, 1, 1, CompatPolicy.of(None))
        plan.data_paths = ["f00", "f01"]
        plan.set_epoch(seed)
        rng = plan.sample_rng(1, 0, 3)
        return [rng.random() for _ in range(4)]

    assert draws() == draws()
    assert draws("h") != draws() and draws(seed=5 + 2**32) != draws() and draws(seed=6) != draws()


def test_each_worker_gets_its_own_row_plan_and_a_restart_s_offset(tmp_path, tokenizer):
    """In the walk by rows, one plan asked for two workers' shares gives each its own rows
    (the cached plan is keyed by the worker), starting at an elastic restart's row offset."""
    import dataclasses

    from bagel_data.families.t2i import T2IIterableDataset
    from bagel_data.sharding import WorkerTopology
    from helpers.builders import solid_jpeg, write_t2i

    row = {"image": solid_jpeg(16, 16), "captions": {"k": "a caption"}}
    write_t2i(tmp_path, [[[row] * 3] for _ in range(2)])
    family = T2IIterableDataset("t2i", ImageTransform(32, 16, 16), tokenizer, [str(tmp_path)], [2], num_workers=2)
    plan = family.units
    assert plan.walks_rows()
    shares = [plan.shard_of(WorkerTopology(0, 1, worker, 2)).rows for worker in (0, 1)]
    assert [share.worker for share in shares] == [0, 1]
    plan.restart_plan = dataclasses.replace(GroupRestart(first_pass=1, segments=(), inherited=()), row_offset=30)
    assert plan.shard_of(WorkerTopology(0, 1, 1, 2)).rows.share.offset == 30


def test_no_dataloader_workers_need_a_unit_per_rank():
    plan = UnitPlan("g", 0, 2, 0, CompatPolicy.of(None))
    with pytest.raises(ConfigError):
        plan.check_enough(1, 0)
    plan.check_enough(2, 0)
