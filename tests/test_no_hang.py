"""No input makes the pipeline spin: a worker that cannot progress raises, naming why.

Each case here used to loop forever at full CPU (issue 15). They run under a thread-free
time bound: the error must come within a few passes, not after a timeout.
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bagel_data import ImageTransform, T2IIterableDataset, UnifiedEditIterableDataset
from bagel_data.errors import EmptyWorkerError, TooManyFailuresError
from bagel_data.packing.config import PackingConfig
from bagel_data.packing.packed_dataset import PackedDataset
from helpers.builders import EDIT_TYPES, T2I_TYPES, solid_jpeg, write_t2i
from helpers.fake_groups import one_group_packed

# Positions, orders and unit counts here are the walk by whole units' (tars', a user family's,
# compat's); the default walk by rows is tests/test_row_walk.py's.
pytestmark = pytest.mark.walk_by_units


TRANSFORM = ImageTransform(64, 32, 16)
GOOD = {"image": solid_jpeg(64, 48), "captions": {"c": "a red square"}}
EDIT_ROW = {"image_list": [solid_jpeg(64, 48)] * 2, "instruction_list": [["make it blue"]]}


def zero_row_parquet(path, types=T2I_TYPES, row_groups: int = 0):
    """A parquet file with no rows: no row group, or `row_groups` empty ones."""
    schema = pa.schema([pa.field(name, kind) for name, kind in types.items()])
    empty = pa.table({name: [] for name in types}, schema=schema)
    if not row_groups:
        pq.write_table(empty, str(path))
        return str(path)
    with pq.ParquetWriter(str(path), schema) as writer:
        for _ in range(row_groups):
            writer.write_table(empty)
    return str(path)


def t2i(folder, tokenizer, files, num_workers=1) -> T2IIterableDataset:
    return T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(folder)], [files], num_workers=num_workers)


def test_zero_row_parquet_file_raises_naming_the_unit(tmp_path, tokenizer):
    zero_row_parquet(tmp_path / "empty.parquet")
    with pytest.raises(EmptyWorkerError, match=r"t2i: rank 0 worker 0 .*empty\.parquet.*no rows"):
        next(iter(t2i(tmp_path, tokenizer, 1)))


def test_file_of_empty_row_groups_raises(tmp_path, tokenizer):
    zero_row_parquet(tmp_path / "hollow.parquet", row_groups=2)
    assert pq.ParquetFile(tmp_path / "hollow.parquet").metadata.num_rows == 0
    with pytest.raises(EmptyWorkerError, match="hollow.parquet"):
        next(iter(t2i(tmp_path, tokenizer, 1)))


def test_one_empty_shard_of_two_workers_raises_in_that_worker(tmp_path, tokenizer):
    """The worker with the good file runs; the one with the empty file raises (not spins)."""
    write_t2i(tmp_path, [[[GOOD]]], names=["a-good.parquet"])
    zero_row_parquet(tmp_path / "b-empty.parquet")
    dataset = t2i(tmp_path, tokenizer, 2, num_workers=2)
    assert outcomes_per_worker(dataset) == {"a-good.parquet": "ok", "b-empty.parquet": "empty"}


def outcomes_per_worker(dataset) -> dict:
    """{file name: "ok" or "empty"} for each of two workers (each holds one unit)."""
    outcomes = {}
    for worker in range(2):
        dataset.worker_shard = _fixed_shard(dataset, worker)
        (unit,) = [dataset.epoch_units[i] for i in dataset.worker_shard().unit_ids]
        name = (unit[0] if isinstance(unit, tuple) else unit).rsplit("/", 1)[1]
        try:
            list(itertools.islice(dataset.iter_samples(), 3))
            outcomes[name] = "ok"
        except EmptyWorkerError as error:
            assert f"worker {worker}" in str(error) and name in str(error)
            outcomes[name] = "empty"
    return outcomes


def _fixed_shard(dataset, worker_id):
    from bagel_data.sharding import WorkerShard, shard_unit_ids

    ids = shard_unit_ids(len(dataset.epoch_units), 0, 1, worker_id, 2)
    return lambda: WorkerShard(0, 1, worker_id, 2, ids)


def test_edit_group_of_empty_row_groups_raises(tmp_path, tokenizer):
    # The first file gives rows to nobody: its two row groups are empty.
    zero_row_parquet(tmp_path / "hollow.parquet", EDIT_TYPES, row_groups=2)
    info = {"hollow.parquet": {"num_row_groups": 2, "num_rows": 0}}
    dataset = UnifiedEditIterableDataset(
        "edit", TRANSFORM, tokenizer, ImageTransform(56, 28, 14), [str(tmp_path)], [1], info, num_workers=1
    )
    with pytest.raises(EmptyWorkerError, match=r"hollow\.parquet"):
        next(iter(dataset))


def test_rows_after_a_resume_cursor_at_the_end_of_a_pass_are_not_an_empty_pass(tmp_path, tokenizer):
    write_t2i(tmp_path, [[[GOOD, GOOD]]])
    dataset = t2i(tmp_path, tokenizer, 1)
    stream = dataset.iter_samples(after=(0, 0, 0, 1))  # the last row of pass 0
    cursor, _ = next(stream)
    assert cursor == (1, 0, 0, 0)


def packed(tokenizer, special_tokens, dataset, **budget) -> PackedDataset:
    config = PackingConfig(
        **dict(dict(expected_num_tokens=60, max_num_tokens=80, max_num_tokens_per_sample=70), **budget)
    )
    return one_group_packed("t2i", dataset, config, special_tokens)


@pytest.mark.parametrize("mandatory", [False, True])
def test_every_sample_over_budget_raises_instead_of_looping(tmp_path, tokenizer, special_tokens, mandatory):
    write_t2i(tmp_path, [[[GOOD] * 3]])
    dataset = t2i(tmp_path, tokenizer, 1)
    dataset.max_consecutive_failures = 7
    pack = packed(tokenizer, special_tokens, dataset, max_num_tokens_per_sample=2)
    pack.is_mandatory = [mandatory]
    with pytest.raises(TooManyFailuresError, match=r"8 samples in a row did not fit .*max_num_tokens"):
        next(iter(pack))
    assert pack.stats["skips"] == {"t2i": {"over_max_num_tokens_per_sample": 8}}


def test_over_budget_run_resets_when_a_sample_fits(tmp_path, tokenizer, special_tokens):
    long = {"image": solid_jpeg(64, 64), "captions": {"c": "word " * 60}}
    write_t2i(tmp_path, [[[long, long, GOOD, long, long, GOOD]]])
    dataset = t2i(tmp_path, tokenizer, 1)
    dataset.max_consecutive_failures = 2
    batches = list(itertools.islice(iter(packed(tokenizer, special_tokens, dataset)), 3))
    assert len(batches) == 3


def test_edit_one_empty_shard_of_two_workers_raises_in_that_worker(tmp_path, tokenizer):
    from helpers.builders import write_edit

    _, info = write_edit(tmp_path, [[[EDIT_ROW]]], names=["a-good.parquet"])
    zero_row_parquet(tmp_path / "b-empty.parquet", EDIT_TYPES, row_groups=1)
    info["b-empty.parquet"] = {"num_row_groups": 1, "num_rows": 0}
    dataset = UnifiedEditIterableDataset(
        "edit", TRANSFORM, tokenizer, ImageTransform(56, 28, 14), [str(tmp_path)], [2], info, num_workers=2
    )
    assert outcomes_per_worker(dataset) == {"a-good.parquet": "ok", "b-empty.parquet": "empty"}


def test_empty_worker_error_reaches_the_training_loop_through_the_loader(tmp_path, tokenizer, special_tokens):
    from bagel_data import build_dataloader

    write_t2i(tmp_path, [[[GOOD] * 4]], names=["a-good.parquet"])
    zero_row_parquet(tmp_path / "b-empty.parquet")
    dataset = packed(tokenizer, special_tokens, t2i(tmp_path, tokenizer, 2, num_workers=2))
    dataset.num_workers = 2
    with pytest.raises(EmptyWorkerError, match=r"b-empty\.parquet"):
        for _ in itertools.islice(build_dataloader(dataset, num_workers=2), 10):
            pass
