"""The tokenizer a checkpoint was taken under, as a fingerprint it records.

A stream resumed under another tokenizer reads the same rows, but every token id after the
restart means something else, and nothing fails: the model trains on noise. So a worker's
checkpoint records what tells a tokenizer apart (its full size with added tokens, the ids of
its special tokens and of the packer's, the encoding of a fixed text), and a resume under a
different one is a `ResumeError` naming both. A checkpoint without a fingerprint (before
this field, or with no tokenizer to read) is not checked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..errors import ResumeError, shown

# Words, digits, punctuation, non-Latin script and a special token: a tokenizer that encodes
# this text the same way almost surely encodes captions the same way.
PROBE_TEXT = "A red cube on 3 blue tiles, 1024px; 猫 — naïve <|im_start|>user\n"
_COMPARED = ("size", "special", "probe")


def tokenizer_fingerprint(tokenizer: Any, special_tokens: Mapping[str, int]) -> dict | None:
    """What tells `tokenizer` apart; None when there is none (or it cannot encode)."""
    if tokenizer is None:
        return None
    try:
        size = len(tokenizer)
        probe = [int(token) for token in tokenizer.encode(PROBE_TEXT)]
    except (TypeError, AttributeError, ValueError):
        return None
    special = {f"packer.{name}": int(value) for name, value in special_tokens.items()}
    for name in _special_names(tokenizer):
        token = _token_id(tokenizer, name)
        if token is not None:
            special[name] = token
    digest = hashlib.sha256(json.dumps(probe).encode()).hexdigest()[:16]
    return {"name": type(tokenizer).__name__, "size": size, "special": dict(sorted(special.items())), "probe": digest}


def check_tokenizer(saved: Any, current: dict | None) -> None:
    """Raise ResumeError when the checkpoint's fingerprint `saved` is not `current`'s."""
    if saved is None or current is None:
        return
    if not isinstance(saved, Mapping) or not set(_COMPARED) <= set(saved):
        raise ResumeError(f"checkpoint field tokenizer = {shown(saved, 120)}: a tokenizer fingerprint")
    differ = [key for key in _COMPARED if saved[key] != current[key]]
    if not differ:
        return
    raise ResumeError(
        f"the checkpoint was taken under another tokenizer: {_described(saved)}; this pipeline's is "
        f"{_described(current)} (they differ in {', '.join(_WHAT[key] for key in differ)}). Every token id after "
        "the restart would mean something else: resume with the same tokenizer (and the same added tokens) "
        "the run was started with, or do not load this checkpoint and start the stream afresh"
    )


_WHAT = {"size": "vocabulary size", "special": "special tokens' ids", "probe": "the encoding of a fixed text"}


def _described(fingerprint: Mapping) -> str:
    # The packer's own ids first: the ones a run's config names.
    special = dict(sorted(fingerprint["special"].items(), key=lambda item: not item[0].startswith("packer.")))
    shown_special = ", ".join(f"{name}={value}" for name, value in list(special.items())[:6])
    more = f" and {len(special) - 6} more" if len(special) > 6 else ""
    return (
        f"{fingerprint.get('name', 'a tokenizer')} of {fingerprint['size']} tokens "
        f"(special {shown_special}{more}; text encoding {fingerprint['probe']})"
    )


def _special_names(tokenizer: Any) -> list[str]:
    try:
        mapping = dict(tokenizer.special_tokens_map)
    except (AttributeError, TypeError):
        return []
    names: list[str] = []
    for value in mapping.values():
        names.extend([value] if isinstance(value, str) else [v for v in value or () if isinstance(v, str)])
    return sorted(set(names))


def _token_id(tokenizer: Any, name: str) -> int | None:
    try:
        token = tokenizer.convert_tokens_to_ids(name)
    except (AttributeError, TypeError, ValueError, KeyError):
        return None
    return int(token) if isinstance(token, int) else None
