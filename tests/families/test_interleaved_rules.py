"""The interleaved family's rules on their own: a group's `segment_defaults` (checked and
merged), the `text_loss` rules, and a segment's role flags (tests/families/test_interleaved.py
runs them through whole documents)."""

from __future__ import annotations

import pytest

from bagel_data import ConfigError
from bagel_data.families.interleaved import DEFAULTS, _flag, check_segment_defaults, text_losses


def test_no_segment_defaults_are_the_defaults_as_a_copy():
    merged = check_segment_defaults("g", None)
    assert merged == DEFAULTS and merged is not DEFAULTS
    merged["cfg"] = False
    assert DEFAULTS["cfg"] is True


def test_given_defaults_are_merged_over_the_defaults():
    merged = check_segment_defaults("g", {"text_loss": "last", "video": "conditioned", "cfg": False})
    assert merged == {**DEFAULTS, "text_loss": "last", "video": "conditioned", "cfg": False}
    assert check_segment_defaults("g", {"first_image": ["generated"]})["first_image"] == ["generated"]
    assert check_segment_defaults("g", {}) == DEFAULTS


@pytest.mark.parametrize("rule", ["all", "none", "after_first_image", "last"])
def test_every_text_loss_rule_is_accepted(rule):
    assert check_segment_defaults("g", {"text_loss": rule})["text_loss"] == rule


@pytest.mark.parametrize(
    "given, key",
    [
        (["text_loss"], "g.segment_defaults"),  # not a mapping
        ({"text_los": "all"}, "g.segment_defaults"),  # unknown key
        ({"text_loss": "some"}, "g.segment_defaults.text_loss"),
        ({"first_image": "understood"}, "g.segment_defaults.first_image"),  # a string, not a list
        ({"first_image": []}, "g.segment_defaults.first_image"),
        ({"later_images": ["generated", "drawn"]}, "g.segment_defaults.later_images"),
        ({"video": "understood"}, "g.segment_defaults.video"),
        ({"cfg": 1}, "g.segment_defaults.cfg"),
        ({"cfg": "yes"}, "g.segment_defaults.cfg"),
    ],
)
def test_a_bad_entry_is_a_config_error_naming_its_key(given, key):
    with pytest.raises(ConfigError) as info:
        check_segment_defaults("g", given)
    assert info.value.key == key


def test_an_unknown_key_is_named_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"text_los.*did you mean.*text_loss"):
        check_segment_defaults("g", {"text_los": "all"})


# text (0), image (1), text (2), video (3), text (4), not a segment (5), text (6)
SEGMENTS = [
    {"type": "text"},
    {"type": "image"},
    {"type": "text"},
    {"type": "video"},
    {"type": "text"},
    "junk",
    {"type": "text"},
]


@pytest.mark.parametrize(
    "rule, supervised",
    [
        ("all", {0, 2, 4, 6}),
        ("none", set()),
        ("after_first_image", {2, 4, 6}),  # strictly after the first image or video
        ("last", {6}),
    ],
)
def test_text_loss_rules_choose_the_supervised_texts(rule, supervised):
    assert text_losses(SEGMENTS, rule) == [i in supervised for i in range(len(SEGMENTS))]


def test_after_first_image_counts_a_video_and_needs_some_visual():
    video_first = [{"type": "text"}, {"type": "video"}, {"type": "text"}, {"type": "image"}, {"type": "text"}]
    assert text_losses(video_first, "after_first_image") == [False, False, True, False, True]
    assert text_losses([{"type": "text"}, {"type": "text"}], "after_first_image") == [False, False]
    assert text_losses([{"type": "image"}], "last") == [False]  # no text: nothing to supervise


def test_a_flag_is_its_value_or_the_default_when_left_out():
    assert _flag({"cfg": True}, "cfg", False) is True
    assert _flag({"cfg": False}, "cfg", True) is False
    assert _flag({"cfg": None}, "cfg", True) is True
    assert _flag({}, "cfg", False) is False
    with pytest.raises(ValueError, match="'cfg' must be true, false or null, got 1"):
        _flag({"cfg": 1}, "cfg", True)
