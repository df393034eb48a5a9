"""Property: any value for any config key is either accepted or a ConfigError, never another
exception (a raw ValueError / TypeError / AttributeError / KeyError would reach the user)."""

from __future__ import annotations

import contextlib
import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bagel_data.config import parse_groups
from bagel_data.errors import ConfigError
from bagel_data.packing.config import PackingConfig
from bagel_data.schema import (
    DATASET_FIELDS,
    DATASET_INFO_FIELDS,
    FRAME_SAMPLER_FIELDS,
    GROUP_FIELDS,
    PACKING_FIELDS,
    RUN_FIELDS,
    TOPOLOGY_FIELDS,
    TRANSFORM_FIELDS,
    check_settings,
    check_topology,
)
from bagel_data.tools.run import load_run_config

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
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
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def accepted_or_config_error(call) -> None:
    """Any other exception fails the test (with hypothesis's smallest example)."""
    with contextlib.suppress(ConfigError):
        call()


@pytest.mark.parametrize("group", ["t2i_pretrain", "unified_edit", "vlm_sft"])
@pytest.mark.parametrize("key", sorted(GROUP_FIELDS))
@SETTINGS
@given(value=JUNK)
def test_group_keys(grouped, info, group, key, value):
    grouped = copy.deepcopy(grouped)
    grouped[group][key] = value
    accepted_or_config_error(lambda: parse_groups(grouped, info, None))


@pytest.mark.parametrize("section", ["image_transform_args", "frame_sampler_args"])
@pytest.mark.parametrize("key", sorted(TRANSFORM_FIELDS.keys() | FRAME_SAMPLER_FIELDS.keys()))
@SETTINGS
@given(value=JUNK)
def test_transform_and_sampler_keys(grouped, info, section, key, value):
    grouped = copy.deepcopy(grouped)
    grouped["vlm_sft"][section][key] = value
    accepted_or_config_error(lambda: parse_groups(grouped, info, None))


@pytest.mark.parametrize("key", sorted(DATASET_INFO_FIELDS))
@SETTINGS
@given(value=JUNK, group=st.sampled_from(["t2i_pretrain", "unified_edit", "vlm_sft"]))
def test_dataset_info_keys(grouped, info, key, value, group):
    info = copy.deepcopy(info)
    name = grouped[group]["dataset_names"][0]
    info[group][name][key] = value
    accepted_or_config_error(lambda: parse_groups(grouped, info, None))


@SETTINGS
@given(entry=JUNK, group=st.sampled_from(["t2i_pretrain", "unified_edit", "vlm_sft"]))
def test_whole_dataset_info_entries_and_groups(grouped, info, entry, group):
    info = copy.deepcopy(info)
    info[group] = entry
    accepted_or_config_error(lambda: parse_groups(grouped, info, None))
    info[group] = {grouped[group]["dataset_names"][0]: entry}
    accepted_or_config_error(lambda: parse_groups(grouped, info, None))


@pytest.mark.parametrize("key", sorted(PACKING_FIELDS))
@settings(max_examples=60, deadline=None)
@given(value=JUNK)
def test_packing_keys(key, value):
    accepted_or_config_error(lambda: PackingConfig(**{key: value}).check())


@settings(max_examples=100, deadline=None)
@given(values=st.fixed_dictionaries({k: JUNK for k in DATASET_FIELDS}), topology=st.tuples(JUNK, JUNK, JUNK))
def test_dataset_and_topology_settings(values, topology):
    accepted_or_config_error(lambda: check_settings(values))
    accepted_or_config_error(lambda: check_topology(*topology))
    assert set(TOPOLOGY_FIELDS) == {"local_rank", "world_size", "num_workers"}


@pytest.mark.parametrize("key", sorted(RUN_FIELDS))
@settings(max_examples=40, deadline=None)
@given(value=JUNK)
def test_run_config_keys(key, value):
    config = {"grouped_datasets": {}, "dataset_info": {}, "packing": {}, key: value}
    accepted_or_config_error(lambda: load_run_config(config))


@settings(max_examples=60, deadline=None)
@given(packing=st.dictionaries(st.sampled_from(sorted(PACKING_FIELDS.keys() | DATASET_FIELDS.keys())), JUNK))
def test_run_config_packing_sections(packing):
    accepted_or_config_error(lambda: load_run_config({"grouped_datasets": {}, "dataset_info": {}, "packing": packing}))
