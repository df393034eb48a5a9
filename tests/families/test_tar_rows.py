"""WebDataset tars in the default mode's walk by rows (`families/row_plan.py`): a tar is split
into its blocks and below, so every sample of a tar group is drawn equally often over whole
rounds whatever the tar sizes and rank x worker counts, one tar feeds 8 workers, and resume
at any step is exact. On today's main tars kept the walk by whole tars: a short tar's
samples were drawn more often, and 1 tar could not feed 2 workers (a ConfigError)."""

from __future__ import annotations

import collections
import io
import itertools
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.packed_dataset import PackedDataset
from bagel_data.sources import tar_index
from bagel_data.tools.draw_spread import draw_spread
from helpers.builders import solid_jpeg, write_tars
from helpers.draws import draw_in_turn
from helpers.golden import as_worker
from helpers.resume import check_save_load_at

TRANSFORM = ImageTransform(32, 16, 16)
IMAGE = solid_jpeg(16, 16)
# Bytes a tar block covers in these tests: a few samples each, so a tar holds several blocks.
SMALL_BLOCKS = 4096


def streams(folder: Path, tars: int, ranks: int, workers: int, tokenizer, buffer: int = 1024) -> list:
    made = []
    for rank in range(ranks):
        for worker in range(workers):
            dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(folder)], [tars], rank, ranks, workers)
            dataset.units.shuffle_buffer_size = buffer
            with as_worker(worker, workers):
                made.append((worker, workers, dataset, dataset.iter_samples()))
    return made


def assert_equal_draws(counts: collections.Counter, total: int, run: int) -> None:
    assert len(counts) == total, "a sample was never drawn"
    assert set(counts.values()) <= {run // total, -(-run // total)}, collections.Counter(counts.values())


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(1, 14), min_size=1, max_size=4),
    ranks=st.integers(1, 2),
    workers=st.integers(1, 3),
    rounds=st.integers(1, 3),
    buffer=st.sampled_from([0, 4, 1024]),
)
def test_equal_draws_over_random_tar_sizes_ranks_and_workers(
    monkeypatch, tokenizer, sizes, ranks, workers, rounds, buffer
):
    """Any tar sizes (several blocks each), rank and worker counts, shuffle on or off: after
    whole rounds every sample was drawn as often as any other, one more at the pass boundary."""
    monkeypatch.setattr(tar_index, "BLOCK_BYTES", SMALL_BLOCKS)
    with tempfile.TemporaryDirectory() as folder:
        write_tars(Path(folder), sizes)
        made = streams(Path(folder), len(sizes), ranks, workers, tokenizer, buffer)
        assert all(dataset.units.walks_rows() for _, _, dataset, _ in made)
        total = sum(sizes)
        chunk = -(-total // (ranks * workers))
        assert_equal_draws(draw_in_turn(made, rounds * chunk)[0], total, rounds * chunk * ranks * workers)


def test_short_tars_are_not_oversampled_and_one_tar_feeds_eight_workers(tmp_path, tokenizer, monkeypatch):
    """Tars of 24 and 4 samples on 2 workers (by whole tars: the short tar's samples 6x as
    often), and one tar of 20 samples on 2 ranks x 4 workers (by whole tars: a ConfigError)."""
    monkeypatch.setattr(tar_index, "BLOCK_BYTES", SMALL_BLOCKS)
    write_tars(tmp_path / "two", [24, 4])
    assert_equal_draws(draw_in_turn(streams(tmp_path / "two", 2, 1, 2, tokenizer), 3 * 14)[0], 28, 3 * 28)
    write_tars(tmp_path / "one", [20])
    made = streams(tmp_path / "one", 1, 2, 4, tokenizer)
    assert_equal_draws(draw_in_turn(made, 3 * 3)[0], 20, 3 * 3 * 8)


def test_validate_s_draw_spread_follows_the_walk(tmp_path, tokenizer):
    """Local tars walk by rows: a spread of 1.0, known without walking the samples; by whole
    tars (compat mode's walk) the spread needs the rows per tar, 6.0 here."""
    write_tars(tmp_path, [24, 4])
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [2], 0, 1, 2)
    assert draw_spread(dataset, None, 1, 2) == 1.0
    dataset.units.walk_by_rows = False
    assert draw_spread(dataset, {0: 24, 1: 4}, 1, 2) == 6.0


def _packed(folder: Path, tokenizer, special_tokens) -> PackedDataset:
    group = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(folder)], [3], num_workers=1)
    config = PackingConfig(expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70, max_buffer_size=3)
    return PackedDataset.from_groups(
        {"t2i": group}, config, special_tokens, weights={"t2i": 1.0}, mandatory={"t2i": False},
        local_rank=0, world_size=1, num_workers=1, data_seed=3,
    )  # fmt: skip


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, 17), min_size=1, max_size=2, unique=True))
def test_resume_at_random_steps_over_tars_is_exact(tmp_path_factory, monkeypatch, tokenizer, special_tokens, cuts):
    """Packs over tars walked by rows, shuffle on: a checkpoint after any step resumes to
    the same packs (through JSON, as a file holds it), also across a pass boundary."""
    monkeypatch.setattr(tar_index, "BLOCK_BYTES", SMALL_BLOCKS)
    folder = tmp_path_factory.mktemp("tars")
    write_tars(folder, [7, 3, 5])
    assert _packed(folder, tokenizer, special_tokens).grouped_datasets[0].units.walks_rows()
    check_save_load_at(lambda: _packed(folder, tokenizer, special_tokens), sorted(cuts), 18)


def test_a_sample_s_position_resumes_just_after_it(tmp_path, tokenizer, monkeypatch):
    """A tar sample's data_indexes ([round, draw, tag]) as data_status resumes after it."""
    monkeypatch.setattr(tar_index, "BLOCK_BYTES", SMALL_BLOCKS)
    write_tars(tmp_path, [6, 9])

    def family(status=None):
        return T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [2], 0, 1, 1, status)

    straight = [s["row_key"] for s in itertools.islice(iter(family()), 24)]
    seen = [s["data_indexes"]["data_indexes"] for s in itertools.islice(iter(family()), 17)]
    assert len(seen[-1]) == 3 and seen[-1][0] == 1, "the second round: a position of the walk by rows"
    assert [s["row_key"] for s in itertools.islice(iter(family({0: seen[-1]})), 7)] == straight[17:]


def test_tars_on_an_object_store_keep_the_walk_by_units(tmp_path, tokenizer):
    """Counting a remote tar's samples takes a pass over it: the walk by whole tars is kept."""
    write_tars(tmp_path, [2])
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(tmp_path)], [1])
    assert dataset.units.walks_rows()
    dataset.units.data_paths = ["s3://bucket/tars/00000.tar"]
    assert not dataset.units.walks_rows()


@pytest.mark.parametrize("workers", [2, 3])
def test_a_bad_sample_is_skipped_in_every_round_and_the_others_stay_equal(tmp_path, tokenizer, monkeypatch, workers):
    """A key without a caption is a counted skip each round; over whole rounds the usable
    samples are drawn equally often (its position is not given to another sample)."""
    monkeypatch.setattr(tar_index, "BLOCK_BYTES", SMALL_BLOCKS)
    write_tars(tmp_path, [9, 5])
    with tarfile.open(tmp_path / "00001.tar", "a") as archive:
        info = tarfile.TarInfo("00001/9999.jpg")
        info.size = len(IMAGE)
        archive.addfile(info, io.BytesIO(IMAGE))
    counts: collections.Counter = collections.Counter()
    skipped = 0
    for worker, count, dataset, stream in streams(tmp_path, 2, 1, workers, tokenizer):
        with as_worker(worker, count):
            for cursor, sample in stream:
                if cursor[0] >= 5:  # five whole rounds of this worker
                    break
                unit, _, *row = sample["row_key"]
                counts[(unit, *row)] += 1
        skipped += dataset.skip_log.counts["no_caption"]
    run = 5 * workers * -(-15 // workers)  # positions of five rounds; the bad key holds one
    assert len(counts) == 14 and set(counts.values()) <= {run // 15, -(-run // 15)}
    assert skipped >= 5


def test_a_checkpoint_of_the_walk_by_whole_tars_is_refused_by_name(tmp_path, tokenizer, special_tokens, monkeypatch):
    """A checkpoint saved while local tars were walked by whole tars (before this walk) names
    why it cannot continue, and what to do, instead of resuming on other samples."""
    from bagel_data import ResumeError
    from bagel_data.families.unit_plan import UnitPlan

    write_tars(tmp_path, [7, 3, 5])
    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)
    old = _packed(tmp_path, tokenizer, special_tokens)
    stream = iter(old)
    for _ in range(3):
        next(stream)
    state = old.state_dict()
    monkeypatch.setattr(UnitPlan, "walk_by_rows", True)
    resumed = _packed(tmp_path, tokenizer, special_tokens)
    with pytest.raises(ResumeError, match="saved while this group was walked by whole units.*finish the run"):
        resumed.load_state_dict(state)
        next(iter(resumed))


def test_validate_reports_an_even_spread_for_tars_and_warns_in_compat_mode(tmp_path, tokenizer):
    """`bagel-data validate` on tars of 24 and 4 samples, 2 workers: 1.0 and no warning in the
    default mode; compat="bagel" (each worker loops over its own tar) 6.0, warned."""
    import dataclasses

    from bagel_data.tools.run import RunConfig
    from bagel_data.tools.validate import validate_config
    from helpers.builders import SMALL_VAE

    write_tars(tmp_path / "tars", [24, 4])
    grouped = {
        "t2i_pretrain": {"dataset_names": ["t2i"], "image_transform_args": SMALL_VAE, "num_used_data": [2], "weight": 1}
    }
    info = {"t2i_pretrain": {"t2i": {"data_dir": str(tmp_path / "tars"), "num_files": 2}}}
    packing = {"expected_num_tokens": 512, "max_num_tokens": 1024, "max_num_tokens_per_sample": 512,
               "prefer_buffer_before": 512}  # fmt: skip
    config = RunConfig(grouped, info, packing)
    report = validate_config(config, num_workers=2, tokenizer=tokenizer)
    assert report.groups["t2i_pretrain"].draw_spread == 1.0
    assert not [w for w in report.warnings if "most-drawn" in w]
    compat = validate_config(dataclasses.replace(config, compat="bagel"), num_workers=2, tokenizer=tokenizer)
    assert compat.groups["t2i_pretrain"].draw_spread == 6.0
    assert [w for w in compat.warnings if "drawn 6.00x as often" in w]
