"""Value kinds of the config schema: each checks one value and describes itself for the docs.

A kind's `check(key, value)` returns the value (unchanged) or raises `ConfigError` naming
the key, the value and the fix. Python's `bool` is an `int`, and YAML reads `"false"` as a
string: both are refused where they would be misread (a bool is no count; a string is no
bool).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from .weights import parse_weight

_MISSING = object()


def _type_name(value: object) -> str:
    return type(value).__name__


def _not_a_number(value: object) -> str:
    """The tail of a type error: a number written as text gets a hint on how to write it."""
    text = f"not a {_type_name(value)}"
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return text
        if "e" in value.lower() and "." not in value:
            return text + " (YAML reads 1e-3 as text: write 1.0e-3)"
        return text + " (write it without quotes)"
    return text


@dataclasses.dataclass(frozen=True)
class Bool:
    def check(self, key: str, value: object) -> object:
        if not isinstance(value, bool):
            raise ConfigError(
                key, value, f"must be true or false (an unquoted YAML boolean), not a {_type_name(value)}"
            )
        return value

    def describe(self) -> str:
        return "bool"


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class Int:
    """A whole number (never a bool or a float), at least `min` when given."""

    min: int | None = None

    def check(self, key: str, value: object) -> object:
        if not _is_int(value):
            raise ConfigError(key, value, f"must be an integer{self._range()}, {_not_a_number(value)}")
        if self.min is not None and int(value) < self.min:  # type: ignore[call-overload]  # _is_int said int
            raise ConfigError(key, value, f"must be an integer{self._range()}")
        return value

    def _range(self) -> str:
        if self.min is None:
            return ""
        return " > 0" if self.min == 1 else f" >= {self.min}"

    def describe(self) -> str:
        return f"int{self._range()}"


@dataclasses.dataclass(frozen=True)
class Number:
    """A finite real number (int or float, never a bool) in [min, max]; `positive` excludes 0."""

    min: float | None = None
    max: float | None = None
    positive: bool = False

    def check(self, key: str, value: object) -> object:
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise ConfigError(key, value, f"must be a number{self._range()}, {_not_a_number(value)}")
        if not math.isfinite(value) or not self._inside(float(value)):
            raise ConfigError(key, value, f"must be a finite number{self._range()}")
        return value

    def _inside(self, value: float) -> bool:
        if self.positive and value <= 0:
            return False
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def _range(self) -> str:
        if self.positive:
            return " > 0"
        if self.min is not None and self.max is not None:
            return f" in [{self.min:g}, {self.max:g}]"
        return f" >= {self.min:g}" if self.min is not None else ""

    def describe(self) -> str:
        return f"number{self._range()}"


@dataclasses.dataclass(frozen=True)
class Str:
    """A non-empty string, one of `choices` when given."""

    choices: Sequence[str] | None = None  # read at each check: a registered `mix_by` rule joins it
    path: bool = False  # a file path or URI; os.PathLike is accepted too

    def check(self, key: str, value: object) -> object:
        if self.path and isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str) or not value:
            what = "a path or URI" if self.path else "a string"
            raise ConfigError(key, value, f"must be {what}{self._choices()}, not a {_type_name(value)}")
        if "\0" in value:
            raise ConfigError(key, value, "contains a NUL character")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(key, value, f"use one of {list(self.choices)}")
        return value

    def _choices(self) -> str:
        return f" ({' | '.join(self.choices)})" if self.choices else ""

    def describe(self) -> str:
        if self.choices:
            return " | ".join(f"`{c}`" for c in self.choices)
        return "path" if self.path else "str"


@dataclasses.dataclass(frozen=True)
class ListOf:
    """A list (or tuple) of `item` values; exactly `length` of them when given."""

    item: Any
    length: int | None = None
    nonempty: bool = False

    def check(self, key: str, value: object) -> object:
        if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
            raise ConfigError(key, value, f"must be {self._what()}, not a {_type_name(value)}")
        if (self.length is not None and len(value) != self.length) or (self.nonempty and not value):
            raise ConfigError(key, value, f"must be {self._what()}")
        for index, item in enumerate(value):
            self.item.check(f"{key}[{index}]", item)
        return value

    def _what(self) -> str:
        if self.length is not None:
            return f"a list of {self.length} values, each {self.item.describe()}"
        return f"a {'non-empty ' if self.nonempty else ''}list, each item {self.item.describe()}"

    def describe(self) -> str:
        size = f"[{self.length}]" if self.length is not None else ""
        return f"list{size} of {self.item.describe()}"


@dataclasses.dataclass(frozen=True)
class GroupWeight:
    """A group's weight: a number >= 0, or a schedule of `[step, weight]` pairs
    (`schema/weights.py`, which holds the rules)."""

    def check(self, key: str, value: object) -> object:
        parse_weight(key, value)
        return value

    def describe(self) -> str:
        return "number >= 0, or [[step, weight], ...]"


@dataclasses.dataclass(frozen=True)
class AnyMapping:
    """A mapping whose keys are not fixed here (filesystem options, a nested section)."""

    what: str = "mapping"

    def check(self, key: str, value: object) -> object:
        if not isinstance(value, Mapping):
            raise ConfigError(key, value, f"must be a {self.what}, not a {_type_name(value)}")
        return value

    def describe(self) -> str:
        return self.what


@dataclasses.dataclass(frozen=True)
class OneOf:
    """The first of `kinds` that accepts the value (e.g. a mapping or a path)."""

    kinds: tuple

    def check(self, key: str, value: object) -> object:
        for kind in self.kinds:
            try:
                return kind.check(key, value)
            except ConfigError:
                continue
        raise ConfigError(key, value, f"must be one of: {self.describe()}, not a {_type_name(value)}")

    def describe(self) -> str:
        return " or ".join(kind.describe() for kind in self.kinds)


@dataclasses.dataclass(frozen=True)
class Field:
    """One key of a config section: its kind, default, whether it is required, and meaning.

    `default` is what the code uses when the key is left out (`_MISSING`: required, or no
    default); `nullable` also accepts null (meaning: the default); `scope` says which groups
    accept the key (docs only: which keys a family accepts is decided by the registry).
    """

    kind: Any
    meaning: str
    default: object = _MISSING
    required: bool = False
    nullable: bool = False
    scope: str = ""

    @property
    def has_default(self) -> bool:
        return self.default is not _MISSING


def join(where: str, key: str) -> str:
    """The dotted name of `key` inside the section `where` ('' for the top level)."""
    return f"{where}.{key}" if where else key


def did_you_mean(unknown: Iterable[str], allowed: Iterable[str]) -> str:
    """` (did you mean 'shuffle_lines' for 'shufle_lines'?)` for each unknown name close to an
    allowed one (difflib's ratio of at least 0.6), or '' when none is."""
    names = sorted(map(str, allowed))
    guesses = [
        f"{close[0]!r} for {name!r}" for name in unknown if (close := difflib.get_close_matches(name, names, n=1))
    ]
    return f" (did you mean {', '.join(guesses)}?)" if guesses else ""


def check_section(where: str, values: object, fields: Mapping[str, Field], allowed=None) -> dict:
    """Check a mapping against `fields`: unknown keys, missing required keys, each value.

    `allowed` narrows the keys accepted (default: every key of `fields`). Returns a copy of
    the mapping; defaults are not filled in (callers keep their own defaults).
    """
    if not isinstance(values, Mapping):
        raise ConfigError(where or "config", values, f"must be a mapping, not a {_type_name(values)}")
    allowed = set(fields) if allowed is None else set(allowed)
    unknown = [key for key in values if key not in allowed]
    if unknown:
        shown = sorted(map(str, unknown))
        raise ConfigError(
            where or "config", shown, f"unknown key(s){did_you_mean(shown, allowed)}; allowed: {sorted(allowed)}"
        )
    for key in sorted(allowed):
        field = fields.get(key)
        if field is None:  # accepted, but not described here (a family's own key)
            continue
        if key not in values:
            if field.required:
                raise ConfigError(join(where, key), None, f"required: {field.meaning}")
            continue
        value = values[key]
        if value is None and (field.nullable or (not field.required and field.default is None)):
            continue
        field.kind.check(join(where, key), value)
    return dict(values)
