"""Property: any value for any config key is accepted exactly when the schema's table says it
is valid, and then takes effect; otherwise it is a ConfigError that names the key.

`conforms` below reads the schema's tables (the contract: kind, range, choices, nullable)
but not the code that checks values, so a checker that lets a wrong value through, rejects a
right one, or blames another key fails here with hypothesis's smallest example. A value
that conforms may still be refused for a rule across keys (e.g. a path that does not exist,
`min_image_size` above `max_image_size`): that ConfigError must name the key too.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bagel_data.config import parse_groups
from bagel_data.errors import ConfigError
from bagel_data.families.registry import allowed_group_keys, entry_fields, group_fields, resolve_family
from bagel_data.packing.config import PackingConfig
from bagel_data.schema import (
    DATASET_FIELDS,
    FRAME_SAMPLER_FIELDS,
    PACKING_FIELDS,
    RUN_FIELDS,
    TOPOLOGY_FIELDS,
    TRANSFORM_FIELDS,
    check_settings,
    check_topology,
)
from bagel_data.schema.kinds import AnyMapping, Bool, Field, GroupWeight, Int, ListOf, Number, OneOf, Str
from bagel_data.tools.run import load_run_config
from bagel_data.tools.schema_doc import section_fields

# Every key a group or a dataset_info entry may take: every group's and each family's own.
GROUP_FIELDS = section_fields("group")
DATASET_INFO_FIELDS = section_fields("dataset_info")

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),  # the bounds (>= 0, > 0) and their neighbours, drawn often
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=4),
)
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
VALUES = st.one_of(SCALARS, JUNK)  # a bare scalar half the time: most keys take one
# Each range's bounds and their neighbours, every type once: run for every key, every time.
EDGES = [None, True, False, -1, 0, 1, 2, -0.5, 0.0, 1e-3, 0.5, 1.0, 1.5, 1000.0, 1000.5, math.inf, math.nan,
         "", "x", "bagel", "sorted", "tokens", "best_fit", "rand", "\0", b"x", [], [0.5, 0.5, 0.5], [1], {}]  # fmt: skip
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
GROUPS = ["t2i_pretrain", "unified_edit", "vlm_sft"]


# -- the contract, from the tables -----------------------------------------------------------
def _is_weight(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _is_schedule(value: object) -> bool:
    """`[[step, weight], ...]`: integer steps from 0, strictly increasing, weights >= 0."""
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or not value:
        return False
    pairs = [pair for pair in value if isinstance(pair, Sequence) and not isinstance(pair, (str, bytes))]
    if len(pairs) != len(value) or any(len(pair) != 2 for pair in pairs):
        return False
    steps = [step for step, _ in pairs]
    if not all(isinstance(step, int) and not isinstance(step, bool) for step in steps):
        return False
    increasing = all(a < b for a, b in itertools.pairwise(steps))
    return steps[0] == 0 and increasing and all(_is_weight(weight) for _, weight in pairs)


def kind_accepts(kind, value: object) -> bool:
    """What a value of `kind` may be, written out from the kinds' documented rules."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(kind, Bool):
        return isinstance(value, bool)
    if isinstance(kind, Int):
        return isinstance(value, int) and not isinstance(value, bool) and (kind.min is None or value >= kind.min)
    if isinstance(kind, Number):
        if not is_number or not math.isfinite(value):
            return False
        low = kind.min is None or value >= kind.min
        return low and (kind.max is None or value <= kind.max) and (not kind.positive or value > 0)
    if isinstance(kind, Str):
        ok = isinstance(value, str) and value != "" and "\0" not in value
        return ok and (kind.choices is None or value in kind.choices)
    if isinstance(kind, ListOf):
        if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
            return False
        if (kind.length is not None and len(value) != kind.length) or (kind.nonempty and not value):
            return False
        return all(kind_accepts(kind.item, item) for item in value)
    if isinstance(kind, AnyMapping):
        return isinstance(value, Mapping)
    if isinstance(kind, OneOf):
        return any(kind_accepts(option, value) for option in kind.kinds)
    if isinstance(kind, GroupWeight):
        return _is_weight(value) or _is_schedule(value)
    raise AssertionError(f"no rule for {kind!r}")


def conforms(field: Field, value: object) -> bool:
    if value is None:
        return field.nullable or (not field.required and field.has_default and field.default is None)
    return kind_accepts(field.kind, value)


# A rule across two keys may name either: one num_used_data count per dataset name.
PAIRED = {"dataset_names": "num_used_data", "num_used_data": "dataset_names"}


def names_the_key(error: ConfigError, key: str) -> bool:
    """The error blames `key` (or the key it is paired with by a rule across keys): in its
    dotted key (`group.key`, `key[2]`), or as the key listed unknown, or in the message."""
    keys = (key, PAIRED[key]) if key in PAIRED else (key,)
    return any(k in str(error.key) or k in str(error.value) or k in str(error) for k in keys)


def outcome(call):
    try:
        return call(), None
    except ConfigError as error:
        return None, error


def check(call, key: str, valid: bool):
    """The call's result when `valid` and accepted; a rejection must name `key`, and an
    invalid value must be rejected."""
    result, error = outcome(call)
    if error is not None:
        assert names_the_key(error, key), f"the ConfigError blames another key: {error}"
        return None
    assert valid, f"{key}: a value outside the schema was accepted"
    return result


# -- grouped_datasets ------------------------------------------------------------------------
@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("key", sorted(GROUP_FIELDS))
@SETTINGS
@given(value=VALUES)
def test_group_keys(grouped, info, group, key, value):
    group_case(grouped, info, group, key, value)


def group_case(grouped, info, group, key, value):
    grouped = copy.deepcopy(grouped)
    grouped[group][key] = value
    known = key in allowed_group_keys(resolve_family(group, {}))  # the group's registered family
    # A dataset_class must name an importable family ("package.module:Class"): no junk does.
    field = group_fields(resolve_family(group, {})).get(key, GROUP_FIELDS[key])  # the family's own, where it has one
    valid = known and conforms(field, value) and (key != "dataset_class" or value is None)
    specs = check(lambda: parse_groups(grouped, info, None), key, valid)
    if specs is None:
        return
    spec = next(spec for spec in specs if spec.name == group)
    effects = {
        "weight": lambda: spec.weight == float(value or 0.0),
        "is_mandatory": lambda: spec.is_mandatory == bool(value),
        "num_used_data": lambda: spec.kwargs["num_used_data"] == list(value),
        "shuffle_lines": lambda: spec.kwargs["shuffle_lines"] == bool(value),
        "shuffle_seed": lambda: spec.kwargs["shuffle_seed"] == (0 if value is None else value),
        "resume_data_status": lambda: spec.resume_data_status == (True if value is None else value),
        "file_order": lambda: spec.kwargs.get("file_order", "sorted") == (value or "sorted"),
    }
    if key in effects:
        assert effects[key](), f"{key} = {value!r} was accepted but not applied"


@pytest.mark.parametrize("section", ["image_transform_args", "frame_sampler_args"])
@pytest.mark.parametrize("key", sorted(TRANSFORM_FIELDS.keys() | FRAME_SAMPLER_FIELDS.keys()))
@SETTINGS
@given(value=VALUES)
def test_transform_and_sampler_keys(grouped, info, section, key, value):
    transform_case(grouped, info, section, key, value)


def transform_case(grouped, info, section, key, value):
    grouped = copy.deepcopy(grouped)
    grouped["vlm_sft"][section][key] = value
    fields = TRANSFORM_FIELDS if section == "image_transform_args" else FRAME_SAMPLER_FIELDS
    valid = key in fields and conforms(fields[key], value)
    check(lambda: parse_groups(grouped, info, None), key, valid)


# -- dataset_info ----------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(DATASET_INFO_FIELDS))
@SETTINGS
@given(value=VALUES, group=st.sampled_from(GROUPS))
def test_dataset_info_keys(grouped, info, key, value, group):
    info = copy.deepcopy(info)
    name = grouped[group]["dataset_names"][0]
    info[group][name][key] = value
    field = entry_fields(resolve_family(group, {})).get(key, DATASET_INFO_FIELDS[key])
    check(lambda: parse_groups(grouped, info, None), key, conforms(field, value))


@SETTINGS
@given(entry=JUNK, group=st.sampled_from(GROUPS))
def test_whole_dataset_info_entries_and_groups(grouped, info, entry, group):
    """No junk is a usable entry (it would need the dataset's existing files): always a
    ConfigError that names the group or its dataset_info section."""
    info = copy.deepcopy(info)
    for broken in (entry, {grouped[group]["dataset_names"][0]: entry}):
        info[group] = broken
        _, error = outcome(lambda: parse_groups(grouped, info, None))
        assert error is not None, f"dataset_info.{group} = {broken!r} was accepted"
        assert group in str(error) or "dataset_info" in str(error.key), error


# -- packing, dataset settings, topology, run config -----------------------------------------
@pytest.mark.parametrize("key", sorted(PACKING_FIELDS))
@settings(max_examples=60, deadline=None)
@given(value=VALUES)
def test_packing_keys(key, value):
    packing_case(key, value)


def packing_case(key, value):
    config = check(lambda: PackingConfig(**{key: value}).check(), key, conforms(PACKING_FIELDS[key], value))
    if config is not None and value is not None:
        assert getattr(config, key) == value, f"{key} = {value!r} was accepted but not applied"


@settings(max_examples=100, deadline=None)
@given(values=st.fixed_dictionaries({k: VALUES for k in DATASET_FIELDS}), topology=st.tuples(VALUES, VALUES, VALUES))
def test_dataset_and_topology_settings(values, topology):
    settings_case(values, topology)


def settings_case(values, topology):
    bad = [key for key, value in values.items() if not conforms(DATASET_FIELDS[key], value)]
    result, error = outcome(lambda: check_settings(values))
    if bad:
        assert error is not None and any(names_the_key(error, key) for key in bad), error
    else:
        assert error is None and result == values
    named = dict(zip(("local_rank", "world_size", "num_workers"), topology))
    bad = [key for key, value in named.items() if not conforms(TOPOLOGY_FIELDS[key], value)]
    _, error = outcome(lambda: check_topology(*topology))
    assert (error is None) == (not bad), (named, error)
    if error is not None:
        assert any(names_the_key(error, key) for key in bad), error


@pytest.mark.parametrize("key", sorted(RUN_FIELDS))
@settings(max_examples=40, deadline=None)
@given(value=VALUES)
def test_run_config_keys(key, value):
    config = {"grouped_datasets": {}, "dataset_info": {}, "packing": {}, key: value}
    valid = conforms(RUN_FIELDS[key], value) and (key != "dataset_info" or value is not None)
    run = check(lambda: load_run_config(config), key, valid)
    if run is None:
        return
    effects = {
        "grouped_datasets": lambda: run.grouped_datasets == value,
        "dataset_info": lambda: run.dataset_info == value,
        "packing": lambda: run.packing == dict(value or {}),
        "compat": lambda: run.compat == value,
    }
    assert effects[key](), f"{key} = {value!r} was accepted but not applied"


@settings(max_examples=60, deadline=None)
@given(packing=st.dictionaries(st.sampled_from(sorted(PACKING_FIELDS.keys() | DATASET_FIELDS.keys())), VALUES))
def test_run_config_packing_sections(packing):
    fields = {**PACKING_FIELDS, **DATASET_FIELDS}
    bad = [key for key, value in packing.items() if not conforms(fields[key], value)]
    run, error = outcome(lambda: load_run_config({"grouped_datasets": {}, "dataset_info": {}, "packing": packing}))
    if bad:
        assert error is not None and any(names_the_key(error, key) for key in bad), error
    else:
        assert error is None and run.packing == packing


# -- the edges, every key, every run ----------------------------------------------------------
@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_edge_values_of_every_key(grouped, info, value):
    for key in sorted(PACKING_FIELDS):
        packing_case(key, value)
    for key in sorted(DATASET_FIELDS):
        settings_case({**{k: f.default for k, f in DATASET_FIELDS.items()}, key: value}, (0, 1, 0))
    for position in range(3):
        settings_case({}, tuple(value if i == position else (0, 1, 0)[i] for i in range(3)))
    for key in sorted(GROUP_FIELDS):
        group_case(grouped, info, "vlm_sft", key, value)
    for key in sorted(TRANSFORM_FIELDS):
        transform_case(grouped, info, "image_transform_args", key, value)
    for key in sorted(FRAME_SAMPLER_FIELDS):
        transform_case(grouped, info, "frame_sampler_args", key, value)
