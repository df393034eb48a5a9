"""`families/worst_case.py`'s text bound for merged edit instructions: with more phrasing
combinations than it enumerates, the bound is computed per step, and it must still be at
least the longest merged instruction any combination tokenizes to."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from bagel_data.families import worst_case

WORDS = ["red", "the", "sky", "turn", "into", "blue", "a", "cat", "dog", "x", "!!", "é", "1", "  ", "-"]
PHRASE = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)


def merged(options: list[list[str]]) -> list[str]:
    return ["".join(p + ". " for p in combo).rstrip() for combo in itertools.product(*options)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(PHRASE, min_size=5, max_size=6), min_size=3, max_size=4))
def test_the_bound_past_the_enumeration_cap_holds_every_combination(tokenizer, options):
    assert len(merged(options)) > worst_case._MAX_ENUMERATED_TEXTS  # the per-step bound is used
    longest = max(len(tokenizer.encode(text)) for text in merged(options))
    assert worst_case._merged_text_tokens(tokenizer.encode, options) >= longest


def test_below_the_cap_the_bound_is_exact(tokenizer):
    options = [["make the sky red", "red sky"], ["add a cat", "a dog!!"], ["blur"]]
    longest = max(len(tokenizer.encode(text)) for text in merged(options))
    assert worst_case._merged_text_tokens(tokenizer.encode, options) == longest
