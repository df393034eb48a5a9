"""The group-choice rules (`mix_by`): which group the next sample is drawn from.

A rule is one stage of the packer with its own state: `choose(weights, rng)` picks a group
from the current weights (a mixture schedule changes them) with the worker's generator,
and it hears of each sample's tokens as they come and go:

- `drawn(group, tokens)`: a sample was drawn fresh;
- `released(group, tokens)`: a sample drawn in an earlier phase left the backlog to be
  packed (`packing/pacing.py`): drawn for other weights, it counts only from now on;
- `dropped(group, tokens)`: a sample drawn or released is a counted skip: its tokens come
  off again, so what the rule steers by is what was packed or waits to be;
- `new_phase()`: a schedule's change point: counts start afresh.

Its state (`state_dict()` / `load_state_dict()`) is saved under `stages.choose` of the
worker's checkpoint. A new rule is a subclass in one file and a `register_group_choice`
call (docs/extending.md shows one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..compat import RandomSource
from ..errors import ResumeError, shown
from ..schema.settings import MIX_BY
from .strategies import choose_by_deficit, choose_by_weight, cumulative_shares


class GroupChoice:
    """A stateless rule's defaults; a rule with state overrides the events it counts and
    `state_dict` / `load_state_dict`."""

    def __init__(self, group_names: Sequence[str]):
        self.group_names = list(group_names)

    def choose(self, weights: Sequence[float], rng: RandomSource) -> int:
        raise NotImplementedError

    def drawn(self, group: int, tokens: int) -> None:
        pass

    def released(self, group: int, tokens: int) -> None:
        pass

    def dropped(self, group: int, tokens: int) -> None:
        pass

    def new_phase(self) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, saved: Mapping, worker: Mapping) -> None:
        """Load `saved` (this rule's part of a checkpoint; `worker`: the whole of it)."""


class WeightedDraw(GroupChoice):
    """`mix_by: samples` (the reference's rule): a group with probability proportional to
    its weight; a weight is a share of samples. It steers by nothing it has seen."""

    def __init__(self, group_names: Sequence[str]):
        super().__init__(group_names)
        self._shares: tuple[tuple, list[float]] = ((), [])

    def choose(self, weights, rng):
        key = tuple(weights)
        if self._shares[0] != key:
            self._shares = (key, cumulative_shares(key))
        return choose_by_weight(self._shares[1], rng.random())


class TokenShares(GroupChoice):
    """`mix_by: tokens`: the group furthest below its target share of the tokens counted so
    far in the phase (`strategies.choose_by_deficit`)."""

    def __init__(self, group_names: Sequence[str]):
        super().__init__(group_names)
        self.tokens = [0] * len(self.group_names)

    def choose(self, weights, rng):
        return choose_by_deficit(weights, self.tokens, rng)

    def drawn(self, group, tokens):
        self.tokens[group] += tokens

    def released(self, group, tokens):
        self.tokens[group] += tokens

    def dropped(self, group, tokens):
        self.tokens[group] -= tokens

    def new_phase(self):
        self.tokens = [0] * len(self.tokens)

    def state_dict(self):
        return {"group_tokens": dict(zip(self.group_names, self.tokens))}

    def load_state_dict(self, saved, worker):
        self.tokens = group_counts("stages.choose.group_tokens", saved.get("group_tokens"), self.group_names)


def group_counts(field: str, counts, group_names: list[str], allow_negative: bool = True) -> list[int]:
    """A saved `{group: int}` as a list in group order (a group it does not name: 0); a
    ResumeError names an unknown group or a value that is not an int."""
    counts = {} if counts is None else counts
    if not isinstance(counts, Mapping):
        raise ResumeError(f"checkpoint field {field} = {shown(counts, 80)}: a mapping of groups to ints")
    unknown = sorted(set(counts) - set(group_names))
    if unknown:
        raise ResumeError(f"checkpoint field {field} names unknown group(s) {unknown}; this pipeline has {group_names}")
    values = [counts.get(name, 0) for name in group_names]
    if not all(isinstance(v, int) and not isinstance(v, bool) and (allow_negative or v >= 0) for v in values):
        kind = "ints" if allow_negative else "non-negative ints"
        raise ResumeError(f"checkpoint field {field} = {shown(counts, 80)}: a mapping of groups to {kind}")
    return [int(v) for v in values]


# `mix_by` -> the rule; `register_group_choice` adds one.
GROUP_CHOICES: dict[str, Callable[[Sequence[str]], GroupChoice]] = {"samples": WeightedDraw, "tokens": TokenShares}


def register_group_choice(name: str, rule: Callable[[Sequence[str]], GroupChoice]) -> None:
    """Make `mix_by: <name>` choose groups by `rule` (a `GroupChoice` subclass); call it
    before the dataset is built, in every process that builds one."""
    GROUP_CHOICES[name] = rule
    if name not in MIX_BY:
        MIX_BY.append(name)


def group_choice_rule(mix_by: str) -> Callable[[Sequence[str]], GroupChoice]:
    """The rule `mix_by` names, as registered now."""
    return GROUP_CHOICES[mix_by]
