"""Preflight: find what would fail or lose data before a training job starts.

`validate_config` checks the configuration (every construction-time error), predicts how
units split over ranks and workers, then walks the rows of each group through the very code
the training run uses (schemas, decodes, placeholders, list lengths, token lengths against
the budgets), all of them or the first `sample` rows of each group. The report says what is
wrong and where; `ok` is False when the run would fail or drop data.
"""

from __future__ import annotations

import dataclasses
import os
import warnings

import numpy as np

from ..datasets import make_bagel_multimodal_dataset
from ..errors import BagelDataError, SkipLog, SkipReason
from ..families.worst_case import has_worst_case, vlm_worst_length, worst_case_rows
from ..sharding import split_evenly
from ..tokenizer import add_special_tokens, load_tokenizer
from .fixes import fix_for
from .run import RunConfig


@dataclasses.dataclass
class GroupReport:
    name: str
    units: int = 0
    rows_checked: int = 0
    samples: int = 0
    skips: dict = dataclasses.field(default_factory=dict)
    examples: dict = dataclasses.field(default_factory=dict)
    lengths: dict = dataclasses.field(default_factory=dict)
    over_budget: int = 0
    units_per_worker: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ValidationReport:
    ok: bool = True
    errors: list = dataclasses.field(default_factory=list)
    warnings: list = dataclasses.field(default_factory=list)
    groups: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _shard_sizes(num_units: int, world_size: int, num_workers: int) -> list[list[int]]:
    """Units of each worker of each rank, as the sharding will give them."""
    sizes = []
    for rank in range(world_size):
        rank_units = len(split_evenly(num_units, world_size, rank))
        sizes.append([len(split_evenly(rank_units, num_workers, w)) for w in range(num_workers)])
    return sizes


def _rows_of(dataset, log):
    """`(location, length)` of every usable row of the group, bad rows counted in `log`. For
    T2I and edit rows the length is the worst case over the row's random choices (caption,
    stretch of the chain, phrasings), so a budget that holds here holds for every draw."""
    if not has_worst_case(dataset):
        for _, sample in dataset._iter_pass(dataset.worker_shard(), 0, None, log):
            yield dataset.row_location(sample["row_key"]), vlm_worst_length(dataset, sample)
        return
    seen = set()
    for unit_id, unit in enumerate(dataset.epoch_units):
        key = tuple(unit) if isinstance(unit, (list, tuple)) else unit
        if key not in seen:  # num_used_data repeats files: one check is enough
            seen.add(key)
            yield from worst_case_rows(dataset, unit_id, log)


def _walk_group(dataset, report: GroupReport, max_rows: int | None, budget: int) -> None:
    """One pass over the group's rows (all of them: built as rank 0 of 1), counting outcomes."""
    log = SkipLog(report.name, strict=False, max_consecutive_failures=10**12)
    lengths = []
    for location, length in _rows_of(dataset, log):
        lengths.append(length)
        if length >= budget:
            report.over_budget += 1
            log.skip(SkipReason.OVER_SAMPLE_BUDGET, location, f"up to {length} tokens, budget {budget}")
        if max_rows is not None and len(lengths) + sum(log.counts.values()) - report.over_budget >= max_rows:
            break
    report.samples = len(lengths) - report.over_budget
    report.rows_checked = len(lengths) + sum(log.counts.values()) - report.over_budget
    report.skips, report.examples = log.as_dict(), dict(log.examples)
    if lengths:
        report.lengths = {"min": int(min(lengths)), "median": int(np.median(lengths)), "max": int(max(lengths))}


def validate_config(
    config: RunConfig,
    *,
    world_size: int = 1,
    num_workers: int = 1,
    sample: int | None = None,
    tokenizer: str | None = None,
) -> ValidationReport:
    report = ValidationReport()
    # `tokenizer`: None / "qwen2" / a local HF tokenizer folder, or a tokenizer object.
    tok = load_tokenizer(tokenizer) if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)) else tokenizer
    tok, special_tokens, _ = add_special_tokens(tok)
    packing = {k: v for k, v in config.packing.items() if k not in ("strict", "max_consecutive_failures")}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dataset = make_bagel_multimodal_dataset(
                tokenizer=tok,
                special_tokens=special_tokens,
                grouped_datasets=config.grouped_datasets,
                dataset_info=config.dataset_info,
                num_workers=1,
                **packing,
            )
        report.warnings.extend(str(w.message) for w in caught)
    except (BagelDataError, ValueError, OSError) as error:
        report.ok = False
        report.errors.append(f"configuration: {error}")
        return report
    budget = dataset.config.max_num_tokens_per_sample
    for name, family in zip(dataset.group_names, dataset.grouped_datasets):
        group = report.groups[name] = GroupReport(name, units=len(family.epoch_units))
        sizes = _shard_sizes(group.units, world_size, max(num_workers, 1))
        group.units_per_worker = sizes
        if min(min(per_rank) for per_rank in sizes) == 0:
            report.errors.append(
                f"{name}: {group.units} units for {world_size} rank(s) x {num_workers} worker(s); "
                f"some workers would get none (needs at least {world_size * max(num_workers, 1)}). "
                "Fix: raise num_used_data (parquet files repeat to fill it), add data, "
                "or use fewer workers (--num-workers) or ranks"
            )
        try:
            _walk_group(family, group, sample, budget)
        except BagelDataError as error:
            report.errors.append(f"{name}: {error}")
        for reason, count in group.skips.items():
            example = group.examples.get(reason, "")
            report.errors.append(
                f"{name}: {count} row(s) would be skipped ({reason}), e.g. {example}. Fix: {fix_for(reason)}"
            )
    report.ok = not report.errors
    return report
