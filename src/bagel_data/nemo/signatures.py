"""The reference's constructor signatures, generated from `Settings` (schema/settings.py).

Each door keeps the reference's positional order for the settings the reference had, and
takes every newer setting keyword-only; all names and defaults come from `Settings`, so a
setting added there reaches every door without an edit here.
"""

from __future__ import annotations

import inspect

from ..schema.settings import DEFAULTS, names_of

_P = inspect.Parameter


def positional(name: str, default=_P.empty) -> inspect.Parameter:
    return _P(name, _P.POSITIONAL_OR_KEYWORD, default=default)


def keyword(name: str, default=None) -> inspect.Parameter:
    return _P(name, _P.KEYWORD_ONLY, default=default)


def positional_settings(*roles: str) -> list[inspect.Parameter]:
    """The settings of `roles`, positional, in their declared order, with their defaults."""
    return [positional(name, DEFAULTS[name]) for name in names_of(*roles)]


def keyword_settings(*roles: str, exclude: tuple[str, ...] = ()) -> list[inspect.Parameter]:
    """The settings of `roles`, keyword-only, with their defaults."""
    return [keyword(name, DEFAULTS[name]) for name in names_of(*roles) if name not in exclude]


def bind_explicit(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict:
    """The arguments the caller actually passed (no defaults filled in), checked against
    `signature`: a wrong name or count is the usual TypeError, naming the callable's form."""
    return dict(signature.bind(*args, **kwargs).arguments)


def with_self(signature: inspect.Signature) -> inspect.Signature:
    """`signature` as an `__init__`'s: `self` first, so `inspect.signature(cls)` shows the rest."""
    return signature.replace(parameters=[positional("self"), *signature.parameters.values()])
