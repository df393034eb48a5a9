"""Per-step data metrics for a training loop: what each step's pack held and what it cost.

`DataMetrics` is fed every batch the loop takes (`metrics.update(batch)`) and gives a flat
dict of floats (`metrics.as_dict()`) ready for `wandb.log` or a TensorBoard writer:

- per group, its share of the packed tokens and of the samples, over the last `window`
  steps (`data/token_share/<group>`, `data/sample_share/<group>`) and since the start
  (`.../since_start/<group>`);
- pack fill (real tokens / `max_num_tokens`) and padding (the rest), last `window` steps
  and since the start; samples per pack;
- rows skipped, by reason, since the start, summed over all DataLoader workers
  (`data/skips/<reason>`, `data/skips/total`): read from the loader's own state, which
  the workers send along with every batch (`bagel_data.loader.merged_stats`);
- the time the loop waited for data (`data/wait_seconds`: mean over the last `window`
  steps; `data/wait_seconds/since_start`: the total), when it iterates through
  `metrics.timed(loader)`.

It reads the batch and never changes it: `batch.to_dict()` still gives the model exactly
the packed fields (BAGEL's trainer passes every key to the model).

Resume: save `metrics.state_dict()` beside `loader.state_dict()` and load both. Every
"since start" figure then counts from the first run's start, as the skip counts already do
(they live in the checkpointed worker states), and the window holds the saved last steps.
The state is plain ints, floats, strings, lists and dicts (`torch.load(weights_only=True)`
reads it); `load_state_dict` checks it and names the field that is wrong.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Iterable, Iterator
from typing import Any

from .errors import ResumeError

PREFIX = "data/"
STATE_VERSION = 1  # the layout of `DataMetrics.state_dict()`


@dataclasses.dataclass
class _Step:
    """What one step's batch held."""

    real: int  # tokens of the samples
    budget: int  # real + padding: max_num_tokens
    tokens: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    samples: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    wait: float | None = None  # seconds the loop waited for it (None: not timed)


class DataMetrics:
    """Running data metrics of a training loop; see the module docstring for the keys.

    `loader`: the DataLoader the batches come from (`build_dataloader`), for the skip counts
    of every worker and for `max_num_tokens`; None works too (no skip counts; the fill of a
    batch without flex padding then needs `max_num_tokens`).
    """

    def __init__(self, loader=None, window: int = 100, max_num_tokens: int | None = None):
        if window < 1:
            raise ValueError(f"window must be at least 1 step, got {window}")
        self.loader = loader
        self.window = int(window)
        dataset = getattr(loader, "dataset", None)
        config = getattr(dataset, "config", None)
        self.max_num_tokens = max_num_tokens or getattr(config, "max_num_tokens", None)
        self.groups: list[str] = list(getattr(dataset, "group_names", []) or [])
        self.steps = 0
        self.recent: collections.deque[_Step] = collections.deque(maxlen=self.window)
        self.tokens: collections.Counter[str] = collections.Counter()
        self.samples: collections.Counter[str] = collections.Counter()
        self.real_tokens = self.budget_tokens = 0
        self.wait_total = 0.0
        self._wait: float | None = None  # the wait of the batch `timed` handed out last

    def timed(self, batches: Iterable) -> Iterator:
        """`batches` (the loader), timing how long each `next()` blocks; the time goes to
        the `update` of the batch it returned."""
        iterator = iter(batches)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self._wait = time.perf_counter() - start
            yield batch

    def update(self, batch: Any) -> None:
        """Count one step's batch (a `SimpleCustomBatch` or the batch dict)."""
        fields = batch if isinstance(batch, dict) else vars(batch)
        lens = list(fields["sample_lens"])
        indexes = fields["batch_data_indexes"]
        real = int(fields["sequence_length"])
        padded = len(lens) > len(indexes)  # flex batches end with the padding's length
        budget = real + int(lens[-1]) if padded else (self.max_num_tokens or real)
        step = _Step(real, budget, wait=self._wait)
        self._wait = None
        for where, length in zip(indexes, lens):
            name = where["dataset_name"]
            if name not in self.groups:
                self.groups.append(name)
            step.tokens[name] += int(length)
            step.samples[name] += 1
        self.recent.append(step)
        self.steps += 1
        self.tokens.update(step.tokens)
        self.samples.update(step.samples)
        self.real_tokens += real
        self.budget_tokens += budget
        self.wait_total += step.wait or 0.0

    def state_dict(self) -> dict:
        """The running figures, for a checkpoint (see the module docstring)."""
        return {
            "version": STATE_VERSION,
            "steps": self.steps,
            "groups": list(self.groups),
            "tokens": dict(self.tokens),
            "samples": dict(self.samples),
            "real_tokens": self.real_tokens,
            "budget_tokens": self.budget_tokens,
            "wait_total": self.wait_total,
            "recent": [_step_state(step) for step in self.recent],
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state_dict()`'s figures; a state that is not one is a ResumeError
        naming the field. The window keeps the last `window` of the saved steps."""
        checked = _checked_state(state)
        self.steps = checked["steps"]
        self.groups = checked["groups"] + [name for name in self.groups if name not in checked["groups"]]
        self.tokens = collections.Counter(checked["tokens"])
        self.samples = collections.Counter(checked["samples"])
        self.real_tokens, self.budget_tokens = checked["real_tokens"], checked["budget_tokens"]
        self.wait_total = checked["wait_total"]
        self.recent = collections.deque(checked["recent"], maxlen=self.window)
        self._wait = None

    def as_dict(self) -> dict[str, float]:
        """The flat dict of floats (keys under `data/`)."""
        out: dict[str, float] = {PREFIX + "steps": float(self.steps)}
        recent_tokens: collections.Counter[str] = collections.Counter()
        recent_samples: collections.Counter[str] = collections.Counter()
        for step in self.recent:
            recent_tokens.update(step.tokens)
            recent_samples.update(step.samples)
        for label, recent, total in (
            ("token_share", recent_tokens, self.tokens),
            ("sample_share", recent_samples, self.samples),
        ):
            for name in self.groups:
                out[f"{PREFIX}{label}/{name}"] = _share(recent[name], recent)
                out[f"{PREFIX}{label}/since_start/{name}"] = _share(total[name], total)
        real = sum(step.real for step in self.recent)
        budget = sum(step.budget for step in self.recent)
        out[PREFIX + "fill"] = real / budget if budget else 0.0
        out[PREFIX + "padding"] = 1 - out[PREFIX + "fill"] if budget else 0.0
        out[PREFIX + "fill/since_start"] = self.real_tokens / self.budget_tokens if self.budget_tokens else 0.0
        out[PREFIX + "padding/since_start"] = 1 - out[PREFIX + "fill/since_start"] if self.budget_tokens else 0.0
        out[PREFIX + "samples_per_pack"] = sum(recent_samples.values()) / len(self.recent) if self.recent else 0.0
        waits = [step.wait for step in self.recent if step.wait is not None]
        out[PREFIX + "wait_seconds"] = sum(waits) / len(waits) if waits else 0.0
        out[PREFIX + "wait_seconds/since_start"] = self.wait_total
        out.update(self._skips())
        return out

    def _skips(self) -> dict[str, float]:
        """Skipped rows by reason, summed over groups and over all the loader's workers."""
        if self.loader is None:
            return {}
        from .loader import merged_stats

        reasons: collections.Counter[str] = collections.Counter()
        for counts in merged_stats(self.loader)["skips"].values():
            reasons.update(counts)
        out = {f"{PREFIX}skips/{reason}": float(count) for reason, count in sorted(reasons.items())}
        out[PREFIX + "skips/total"] = float(sum(reasons.values()))
        return out


def _share(count: int, counts: collections.Counter) -> float:
    total = sum(counts.values())
    return count / total if total else 0.0


# -- the checkpoint -----------------------------------------------------------------------
def _step_state(step: _Step) -> dict:
    return {
        "real": step.real,
        "budget": step.budget,
        "tokens": dict(step.tokens),
        "samples": dict(step.samples),
        "wait": step.wait,
    }


def _bad(field: str, value: Any, expected: str) -> ResumeError:
    return ResumeError(
        f"DataMetrics state: {field} = {str(value)[:80]!r} is not {expected}; load what "
        f"DataMetrics.state_dict() saved (version {STATE_VERSION})"
    )


def _count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(field, value, "a non-negative int")
    return value


def _seconds(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise _bad(field, value, "a non-negative number of seconds")
    return float(value)


def _counts(value: Any, field: str) -> collections.Counter[str]:
    if not isinstance(value, dict):
        raise _bad(field, value, "a dict of group name -> count")
    for name, count in value.items():
        if not isinstance(name, str):
            raise _bad(f"{field} key", name, "a group name (str)")
        _count(count, f"{field}[{name!r}]")
    return collections.Counter(value)


def _field(state: dict, name: str) -> Any:
    if name not in state:
        raise ResumeError(f"DataMetrics state: the field {name!r} is missing; load what DataMetrics.state_dict() saved")
    return state[name]


def _checked_step(value: Any, field: str) -> _Step:
    if not isinstance(value, dict):
        raise _bad(field, value, "a dict (one step)")
    wait = _field(value, "wait")
    return _Step(
        _count(_field(value, "real"), f"{field}.real"),
        _count(_field(value, "budget"), f"{field}.budget"),
        _counts(_field(value, "tokens"), f"{field}.tokens"),
        _counts(_field(value, "samples"), f"{field}.samples"),
        None if wait is None else _seconds(wait, f"{field}.wait"),
    )


def _checked_state(state: Any) -> dict:
    """`state` as `load_state_dict` takes it in: each field checked, steps rebuilt."""
    if not isinstance(state, dict):
        raise _bad("state", type(state).__name__, "a dict")
    version = _field(state, "version")
    if version != STATE_VERSION:
        raise ResumeError(
            f"DataMetrics state: version = {version!r}; this bagel_data reads version {STATE_VERSION}. "
            "Load it with the bagel_data version that saved it, or start the metrics afresh"
        )
    groups = _field(state, "groups")
    if not isinstance(groups, list) or not all(isinstance(name, str) for name in groups):
        raise _bad("groups", groups, "a list of group names")
    recent = _field(state, "recent")
    if not isinstance(recent, list):
        raise _bad("recent", recent, "a list of steps")
    steps = _count(_field(state, "steps"), "steps")
    if len(recent) > steps:
        raise _bad("recent", f"{len(recent)} steps", f"at most steps = {steps} steps")
    return {
        "steps": steps,
        "groups": list(groups),
        "tokens": _counts(_field(state, "tokens"), "tokens"),
        "samples": _counts(_field(state, "samples"), "samples"),
        "real_tokens": _count(_field(state, "real_tokens"), "real_tokens"),
        "budget_tokens": _count(_field(state, "budget_tokens"), "budget_tokens"),
        "wait_total": _seconds(_field(state, "wait_total"), "wait_total"),
        "recent": [_checked_step(step, f"recent[{i}]") for i, step in enumerate(recent)],
    }
