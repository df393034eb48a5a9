"""`build_from_run_config`: what a run config builds when the caller leaves the topology
and the worker count to it (one rank, one worker: the CLI's `run` and `validate` defaults)."""

from __future__ import annotations

from bagel_data.tools.run import RunConfig, build_from_run_config
from helpers.golden import absolute_dataset_info, load_case


def test_the_defaults_build_one_worker_of_one_rank(tokenizer, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    case, _, _ = load_case("packed_three_groups_flex")
    run = RunConfig(case["grouped_datasets"], absolute_dataset_info(case), dict(case["packing"]))
    dataset = build_from_run_config(run, tokenizer=tokenizer).dataset
    assert dataset.num_workers == 1
    assert {family.worker_shard().global_worker for family in dataset.grouped_datasets} == {(0, 1)}


def test_run_pipeline_defaults_to_the_clis_worker_count():
    import inspect

    from bagel_data.cli.options import DEFAULT_NUM_WORKERS
    from bagel_data.tools.run import run_pipeline

    assert inspect.signature(run_pipeline).parameters["num_workers"].default == DEFAULT_NUM_WORKERS


def test_run_pipeline_counts_the_tokens_and_samples_it_drew(tokenizer):
    import itertools

    from bagel_data.tools.run import run_pipeline

    case, _, _ = load_case("packed_three_groups_flex")
    run = RunConfig(case["grouped_datasets"], absolute_dataset_info(case), dict(case["packing"]))
    summary = run_pipeline(run, num_batches=3, num_workers=0, tokenizer=tokenizer)
    packs = list(itertools.islice(iter(build_from_run_config(run, tokenizer=tokenizer).dataset), 3))
    assert summary.batches == 3
    assert summary.tokens == sum(int(pack["sequence_length"]) for pack in packs) > 0
    assert 0 < summary.fill_ratio <= 1
    assert sum(summary.samples.values()) == sum(len(pack["batch_data_indexes"]) for pack in packs)


def test_run_pipeline_in_the_main_process_draws_the_packs_of_one_worker(tokenizer):
    """`num_workers=0` loads in the main process: the packs are those of a one-worker
    dataset, sample for sample, not those of some worker of a larger split."""
    import itertools

    from bagel_data.tools.run import run_pipeline

    case, _, _ = load_case("packed_three_groups_flex")
    run = RunConfig(case["grouped_datasets"], absolute_dataset_info(case), dict(case["packing"]))
    drawn: list = []
    run_pipeline(run, num_batches=4, num_workers=0, tokenizer=tokenizer, on_batch=lambda _, b: drawn.append(b))
    packs = list(itertools.islice(iter(build_from_run_config(run, tokenizer=tokenizer).dataset), 4))
    assert [batch.batch_data_indexes for batch in drawn] == [pack["batch_data_indexes"] for pack in packs]


def test_run_pipeline_in_the_main_process_needs_only_one_unit_per_group(tmp_path, tokenizer):
    """Loading in the main process is one worker: a group of one file is enough (a count of
    workers taken for two would refuse it as too few units)."""
    from bagel_data.tools.run import run_pipeline
    from helpers.builders import png_bytes, t2i_run_config

    row = {"image": png_bytes(40, 30, (200, 90, 20)), "captions": {"a": "an orange square"}}
    run = t2i_run_config(tmp_path / "t2i", [[[row] * 3]], budget=256)
    summary = run_pipeline(run, num_batches=2, num_workers=0, tokenizer=tokenizer)
    assert summary.batches == 2 and summary.samples["t2i_pretrain"] >= 2
