"""Running the packed pipeline from a run config: the engine behind `demo` and `run`.

A run config is a YAML/JSON mapping with `grouped_datasets` and `dataset_info` (each a
mapping or a path relative to the run config), optional `packing` (any of the settings,
`schema/settings.py`), and optional `compat: bagel` (the reference's exact behaviour,
docs/compat.md; `packing.compat_seed` seeds it outside DataLoader workers). It builds
through the same path as every other entrance (`assembly.build_packed_dataset`).
A plain grouped-datasets YAML (BAGEL's own format) is accepted too, with `dataset_info`
given separately.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from ..assembly import build_packed_dataset
from ..checkpoint.collect import worker_dataset_states
from ..compat import check_compat
from ..config import load_mapping
from ..distributed import RANK_UNSET, WORLD_UNSET
from ..errors import ConfigError
from ..loader import build_dataloader
from ..metrics import DataMetrics
from ..packing.packed_dataset import PackedDataset
from ..schema import RUN_PACKING_FIELDS, Settings, check_run_config
from ..tokenizer import TokenizerLike, add_special_tokens, load_tokenizer
from .drops import UNREADABLE, rows_per_unit

# Every setting but `compat` (a top-level key of the run config): `Settings`' fields.
PACKING_KEYS = set(RUN_PACKING_FIELDS)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    grouped_datasets: dict
    dataset_info: dict | str
    packing: dict
    compat: str | None = None  # "bagel": reproduce the reference exactly (docs/compat.md)

    def __post_init__(self):
        check_compat(self.compat)

    def settings(self) -> Settings:
        """The run's `Settings`: its `packing:` section plus the top-level `compat`."""
        return Settings(**self.packing, compat=self.compat)


def _resolve_relative(value, base: str | None):
    if isinstance(value, str) and base and not os.path.isabs(value) and "://" not in value:
        return os.path.join(base, value)
    return value


def load_run_config(path: str, dataset_info: str | None = None) -> RunConfig:
    """Read a run config, or a grouped-datasets YAML plus a `dataset_info` path."""
    data, base = load_mapping(path, "config")
    if "grouped_datasets" in data:
        data = check_run_config(data)  # the top level and every packing value
        grouped, _ = load_mapping(_resolve_relative(data["grouped_datasets"], base), "grouped_datasets")
        info = dataset_info or _resolve_relative(data.get("dataset_info"), base)
        packing = dict(data.get("packing") or {})
        compat = data.get("compat")
    else:
        grouped, info, packing, compat = data, dataset_info, {}, None
    if info is None:
        raise ConfigError("dataset_info", None, "pass --dataset-info PATH or put dataset_info in the run config")
    return RunConfig(grouped, info, packing, compat)


@dataclasses.dataclass
class RunSummary:
    batches: int = 0
    tokens: int = 0
    max_num_tokens: int = 0
    seconds: float = 0.0
    first_batch_seconds: float = 0.0
    samples: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    skips: dict = dataclasses.field(default_factory=dict)
    state_bytes: int = 0
    metrics: dict = dataclasses.field(default_factory=dict)  # DataMetrics.as_dict() after the last batch
    # Per group with unreadable units: the rows each stands for (tools/drops.py, rows_per_unit).
    unit_rows: dict = dataclasses.field(default_factory=dict)

    @property
    def fill_ratio(self) -> float:
        return self.tokens / (self.batches * self.max_num_tokens) if self.batches else 0.0


def resolve_tokenizer(tokenizer: str | os.PathLike[str] | TokenizerLike | None) -> TokenizerLike:
    """A tokenizer object: loaded for None / a name / a folder (`load_tokenizer`), else as given."""
    if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)):
        return load_tokenizer(tokenizer)
    return tokenizer


class BuiltRun(NamedTuple):
    """What `build_from_run_config` makes: the packed dataset and the tokenizer it uses."""

    dataset: PackedDataset
    tokenizer: TokenizerLike
    special_tokens: dict[str, int]


def build_from_run_config(
    run: RunConfig,
    *,
    rank: int = RANK_UNSET,
    world_size: int = WORLD_UNSET,
    num_workers: int = 1,
    tokenizer: str | os.PathLike[str] | TokenizerLike | None = None,
) -> BuiltRun:
    """The packed dataset of a run config: the one way every tool builds from one.

    `tokenizer` is None / "qwen2" / a local Hugging Face tokenizer folder, or a tokenizer
    object (reused as is, e.g. one already warmed up). `rank` / `world_size` left unset are
    resolved as `make_bagel_multimodal_dataset` does (from the environment).
    """
    tok, special_tokens, _ = add_special_tokens(resolve_tokenizer(tokenizer))
    dataset = build_packed_dataset(
        tok,
        special_tokens,
        run.grouped_datasets,
        run.dataset_info,
        run.settings(),
        local_rank=rank,
        world_size=world_size,
        num_workers=num_workers,
    )
    return BuiltRun(dataset, tok, special_tokens)


def run_pipeline(
    config: RunConfig,
    *,
    num_batches: int,
    num_workers: int = 2,
    rank: int = 0,
    world_size: int = 1,
    tokenizer: str | None = None,
    on_batch: Callable[[int, object], None] | None = None,
) -> RunSummary:
    """Build the packed dataset and DataLoader, draw `num_batches` packs, summarize."""
    dataset = build_from_run_config(
        config, rank=rank, world_size=world_size, num_workers=max(num_workers, 1), tokenizer=tokenizer
    ).dataset
    loader = build_dataloader(dataset, num_workers=num_workers)
    summary = RunSummary(max_num_tokens=dataset.config.max_num_tokens)
    metrics = DataMetrics(loader, window=max(num_batches, 1))  # what a training loop would log
    start = time.perf_counter()
    for index, batch in enumerate(metrics.timed(loader)):
        if index == 0:
            summary.first_batch_seconds = time.perf_counter() - start
        metrics.update(batch)
        summary.batches += 1
        summary.tokens += batch.sequence_length
        summary.samples.update(where["dataset_name"] for where in batch.batch_data_indexes)
        if on_batch is not None:
            on_batch(index, batch)
        if summary.batches >= num_batches:
            break
    summary.seconds = time.perf_counter() - start
    summary.skips, summary.state_bytes = _gather_worker_state(loader.state_dict())
    summary.metrics = metrics.as_dict()
    for name, group in zip(dataset.group_names, dataset.grouped_datasets):
        if summary.skips.get(name, {}).get(UNREADABLE):
            summary.unit_rows[name] = rows_per_unit(group)
    return summary


def _gather_worker_state(loader_state: Mapping) -> tuple[dict, int]:
    """Skip counts summed over workers, and the size of one worker's checkpoint."""
    import pickle

    skips: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    states = worker_dataset_states(dict(loader_state))
    for state in states:
        for group, counts in state.get("skips", {}).items():
            skips[group].update(counts)
    size = max((len(pickle.dumps(state)) for state in states), default=0)
    return {group: dict(counts) for group, counts in skips.items() if counts}, size
