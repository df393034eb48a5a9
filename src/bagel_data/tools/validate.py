"""Preflight: find what would fail or lose data before a training job starts.

`validate_config` checks the configuration (every construction-time error), predicts how
units split over ranks and workers, then walks the rows of each group through the very code
the training run uses (schemas, decodes, placeholders, list lengths, token lengths against
the budgets), all of them or the first `sample` rows of each group. The report says what is
wrong and where; `ok` is False when the run would fail or drop data.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import warnings

import numpy as np

from ..errors import BagelDataError, SkipLog, SkipReason
from ..schema.weights import phases
from ..sharding import shard_unit_ids, split_evenly, units_needed
from .draw_spread import draw_spread, spread_warning
from .fixes import fix_for
from .lag import change_lags
from .run import RunConfig, build_from_run_config, resolve_tokenizer
from .shuffle_hold import hold_warning, shuffle_hold
from .validate_compat import compat_split


@dataclasses.dataclass
class GroupReport:
    name: str
    units: int
    rows_checked: int = 0
    samples: int = 0
    skips: dict = dataclasses.field(default_factory=dict)
    examples: dict = dataclasses.field(default_factory=dict)
    lengths: dict = dataclasses.field(default_factory=dict)
    over_budget: int = 0
    units_per_worker: list = dataclasses.field(default_factory=list)
    empty_units: list = dataclasses.field(default_factory=list)
    # Most- over least-drawn sample's draw rate (tools/draw_spread.py); None: not all counted.
    draw_spread: float | None = None
    # Arrow memory of the row groups one worker's shuffle keeps open, estimated from footers
    # (tools/shuffle_hold.py); None where it holds no parquet row groups.
    shuffle_hold_mb: float | None = None


@dataclasses.dataclass
class ValidationReport:
    ok: bool = True
    errors: list = dataclasses.field(default_factory=list)
    warnings: list = dataclasses.field(default_factory=list)
    groups: dict = dataclasses.field(default_factory=dict)
    phases: list = dataclasses.field(default_factory=list)  # the mixture schedule's, from step 0
    lags: list = dataclasses.field(default_factory=list)  # the lag at each change point (tools/lag.py)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _shard_sizes(num_units: int, world_size: int, num_workers: int) -> list[list[int]]:
    """Units of each worker of each rank, as the sharding will give them."""
    sizes = []
    for rank in range(world_size):
        rank_units = len(split_evenly(num_units, world_size, rank))
        sizes.append([len(split_evenly(rank_units, num_workers, w)) for w in range(num_workers)])
    return sizes


def _unit_rows(dataset, shard, index: int, unit_id: int, log: SkipLog):
    """`(location, length)` of every usable row of one unit, bad rows counted in `log`. The
    length is the family's worst case over the row's random choices (`worst_case_rows`:
    caption, stretch of the chain, phrasings, frame count, parse_row's draws), so a budget
    that holds here holds for every draw; a user's family is measured the same way."""
    yield from dataset.worst_case_rows(shard, index, unit_id, log)


def _walk_group(
    dataset, report: GroupReport, max_rows: int | None, budget: int, mandatory: bool, unit_rows: dict | None = None
) -> list[int] | None:
    """One pass over the group's units (all of them: built as rank 0 of 1), counting
    outcomes; returns the ids of the units that gave neither a row nor a skip (None when
    `max_rows` stopped the walk early); `unit_rows` gets each unit's usable rows. A sample over `budget` is skipped as the packer
    skips it: a mandatory group's sample must be strictly under it (it opens a pack beside
    the other mandatory ones), any other may reach it."""
    log = SkipLog(report.name, strict=False, max_consecutive_failures=10**12)
    stopped_early = False
    lengths: list[int] = []
    empty: list[int] = []
    seen: dict[object, bool] = {}  # unit -> it was empty; num_used_data repeats files: check once
    first_of: dict[object, int] = {}  # unit -> the id it was first walked as
    shard = dataset.worker_shard()
    for index, unit_id in enumerate(int(unit) for unit in shard.unit_ids):
        unit = dataset.epoch_units[unit_id]
        key = tuple(unit) if isinstance(unit, (list, tuple)) else unit
        if key in seen:
            if seen[key]:
                empty.append(unit_id)
            if unit_rows is not None:
                unit_rows[unit_id] = unit_rows[first_of[key]]
            continue
        first_of[key] = unit_id
        before = (len(lengths), log.total())
        over_before = report.over_budget
        for location, length in _unit_rows(dataset, shard, index, unit_id, log):
            lengths.append(length)
            if length > budget or (mandatory and length == budget):
                report.over_budget += 1
                log.skip(SkipReason.OVER_SAMPLE_BUDGET, location, f"up to {length} tokens, budget {budget}")
        seen[key] = before == (len(lengths), log.total())
        if unit_rows is not None:
            unit_rows[unit_id] = len(lengths) - before[0] - (report.over_budget - over_before)
        if seen[key]:
            empty.append(unit_id)
        if max_rows is not None and len(lengths) + sum(log.counts.values()) - report.over_budget >= max_rows:
            stopped_early = True
            break
    report.samples = len(lengths) - report.over_budget
    report.rows_checked = len(lengths) + sum(log.counts.values()) - report.over_budget
    report.skips, report.examples = log.as_dict(), dict(log.examples)
    if lengths:
        report.lengths = {"min": int(min(lengths)), "median": int(np.median(lengths)), "max": int(max(lengths))}
    return None if stopped_early else empty


def _stuck_workers(dataset, name: str, empty: list[int], world_size: int, num_workers: int) -> list[str]:
    """Errors for the workers whose units are all empty: they would stop the run."""
    empty_set, errors = set(empty), []
    for rank in range(world_size):
        for worker in range(max(num_workers, 1)):
            ids = [int(i) for i in shard_unit_ids(len(dataset.epoch_units), rank, world_size, worker, num_workers)]
            if ids and all(i in empty_set for i in ids):
                units = ", ".join(dataset.units.label(i) for i in ids[:3])
                errors.append(
                    f"{name}: rank {rank} worker {worker} would get only empty units ({units}) and stop the "
                    "run (EmptyWorkerError); remove the empty files or add non-empty ones"
                )
    return errors


def validate_config(
    config: RunConfig,
    *,
    world_size: int = 1,
    num_workers: int = 1,
    sample: int | None = None,
    tokenizer: str | None = None,
) -> ValidationReport:
    report = ValidationReport()
    tok = resolve_tokenizer(tokenizer)  # raises: a tokenizer that cannot load is not a data problem
    packing = {k: v for k, v in config.packing.items() if k not in ("strict", "max_consecutive_failures")}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            built = build_from_run_config(dataclasses.replace(config, packing=packing), tokenizer=tok)
            dataset = built.dataset
        report.warnings.extend(str(w.message) for w in caught)
    except (BagelDataError, ValueError, OSError) as error:
        report.ok = False
        report.errors.append(f"configuration: {error}")
        return report
    if dataset.policy.reference:  # the walk is an iteration: compat draws from the stream one starts
        dataset.policy.start_stream(dataset.data_seed)
    budget = dataset.config.max_num_tokens_per_sample
    for name, family, mandatory in zip(dataset.group_names, dataset.grouped_datasets, dataset.is_mandatory):
        group = report.groups[name] = GroupReport(name, units=len(family.epoch_units))
        _check_group(report, group, family, world_size, num_workers, sample, budget, mandatory)
        report.warnings.extend(repeats_note(name, family.epoch_units))
        report.warnings.extend(cfg_warnings(name, family, dataset.config, min(sample or 32, 32)))
    report.phases = schedule_phases(dataset)
    report.lags = schedule_lags(report, dataset, num_workers)
    report.ok = not report.errors
    return report


def repeats_note(name: str, units) -> list[str]:
    """A note when num_used_data repeats a group's files (parquet files repeat to fill it):
    an epoch reads them more than once, which is easy to miss. A unit is a file or a
    (file, row group); a file's row group 0 stands for one reading of it."""
    readings: collections.Counter[str] = collections.Counter()
    for unit in units:
        if isinstance(unit, str):
            readings[unit] += 1
        elif isinstance(unit, (tuple, list)) and len(unit) == 2 and isinstance(unit[0], str):
            readings[unit[0]] += unit[1] == 0
    times = sorted(set(readings.values()))
    if not times or times[-1] < 2:
        return []
    each = f"{times[0]} times" if len(times) == 1 else f"{times[0]} to {times[-1]} times"
    return [
        f"{name}: num_used_data repeats files: {sum(readings.values())} files from {len(readings)}, each read {each}"
    ]


_DROPOUT = {
    "text": "text_cond_dropout_prob",
    "vit_image": "vit_cond_dropout_prob",
    "vae_image": "vae_cond_dropout_prob",
}


def cfg_warnings(name: str, family, config, samples: int = 32) -> list[str]:
    """A warning when a group that only understands (no generated image in its first
    `samples` samples) lets CFG dropout drop what its supervised texts depend on, or those
    texts themselves: the answers then train without their image or question. BAGEL's VLM
    family turns CFG off there; CFG dropout is for generation."""
    counts: dict[str, int] = {}
    seen = 0
    try:
        for _, sample in itertools.islice(family.iter_pass(SkipLog(name, False, 10**12)), samples):
            seen += 1
            plan = sample["sequence_plan"]
            if any(item["type"] == "vae_image" and item["loss"] for item in plan):
                return []  # it generates: CFG dropout is what trains guidance
            last_loss = max((i for i, item in enumerate(plan) if item["loss"]), default=-1)
            for item in plan[: last_loss + 1]:
                if item["enable_cfg"] and getattr(config, _DROPOUT[item["type"]]) > 0:
                    counts[item["type"]] = counts.get(item["type"], 0) + 1
    except BagelDataError:
        return []  # the walk reports it
    if not counts:
        return []
    items = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items()))
    rates = ", ".join(f"{_DROPOUT[kind]}={getattr(config, _DROPOUT[kind])}" for kind in sorted(counts))
    return [
        f"{name}: understanding only (no generated image in its first {seen} samples), but CFG dropout may "
        f"drop items its supervised texts depend on ({items}; {rates}), so those answers train without "
        "them. Turn CFG off for them: enable_cfg=False in add_image / add_text, or cfg: false in the "
        "interleaved family's segment_defaults (docs/formats/interleaved.md)"
    ]


def schedule_phases(dataset) -> list[dict]:
    """The mixture schedule's phases (`packing/schedule.py`): from which step, which weights."""
    weights = dict(zip(dataset.group_names, dataset.weight_schedules))
    return [{"from_step": start, "weights": phase} for start, phase in phases(weights)]


def schedule_lags(report: ValidationReport, dataset, num_workers: int) -> list[dict]:
    """The lag to expect at each change point, from the buffer, the pack budget and the
    median sample lengths the walk measured (`tools/lag.py`)."""
    cfg = dataset.config
    medians = {name: group.lengths.get("median") for name, group in report.groups.items()}
    return change_lags(
        report.phases,
        {name: median for name, median in medians.items() if median},
        max_buffer_size=max(cfg.max_buffer_size, 1),
        max_num_tokens=cfg.max_num_tokens,
        num_workers=num_workers,
        paced=dataset.policy.paces_stage_backlog and cfg.mix_by == "tokens",
        mix_by=cfg.mix_by,
    )


def _check_group(
    report: ValidationReport,
    group: GroupReport,
    family,
    world_size: int,
    num_workers: int,
    sample: int | None,
    budget: int,
    mandatory: bool,
) -> None:
    """One group's checks: its units' split over ranks and workers, then a walk over its
    rows; what would fail or drop data goes into `report`'s errors."""
    name = group.name
    sizes = _shard_sizes(group.units, world_size, max(num_workers, 1))
    if family.policy.reference:  # the reference's split: remainders never read (tools/validate_compat.py)
        sizes, notes = compat_split(family, world_size, num_workers)
        report.warnings.extend(notes)
    group.units_per_worker = sizes
    if min(min(per_rank) for per_rank in sizes) == 0 and not family.units.walks_rows():  # rows feed any worker
        report.errors.append(
            f"{name}: {group.units} units for {world_size} rank(s) x {num_workers} worker(s); "
            f"some workers would get none (needs at least {units_needed(world_size, num_workers)}). "
            "Fix: raise num_used_data (parquet files repeat to fill it), add data, "
            "or use fewer workers (--num-workers) or ranks"
        )
    unit_rows: dict[int, int] = {}
    try:
        empty = _walk_group(family, group, sample, budget, mandatory, unit_rows)
    except BagelDataError as error:
        report.errors.append(f"{name}: {error}")
        empty = None
    group.draw_spread = draw_spread(family, unit_rows if empty is not None else None, world_size, num_workers)
    report.warnings.extend(spread_warning(name, group.draw_spread, family.policy.reference))
    hold = shuffle_hold(family)
    group.shuffle_hold_mb = None if hold is None else round(hold.per_worker_mb, 1)
    report.warnings.extend(hold_warning(name, hold, num_workers))
    if empty:
        group.empty_units = [family.units.label(i) for i in empty[:20]]
        report.warnings.append(f"{name}: {len(empty)} unit(s) hold no rows, e.g. {group.empty_units[0]}")
        report.errors.extend(_stuck_workers(family, name, empty, world_size, num_workers))
    if group.over_budget and group.samples == 0:
        report.errors.append(
            f"{name}: every sample is over max_num_tokens_per_sample={budget}"
            f"{' (a mandatory group must stay under it)' if mandatory else ''}; the run would stop "
            "(TooManyFailuresError). Raise the budget or lower image sizes / text lengths"
        )
    for reason, count in group.skips.items():
        example = group.examples.get(reason, "")
        report.errors.append(
            f"{name}: {count} row(s) would be skipped ({reason}), e.g. {example}. Fix: {fix_for(reason)}"
        )
