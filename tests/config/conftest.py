"""A valid three-group config (the conformance case `packed_three_groups_flex`) to break one key at a time."""

from __future__ import annotations

import copy

import pytest

from helpers.golden import absolute_dataset_info, load_case


@pytest.fixture(scope="session")
def three_groups(golden_root) -> dict:
    case, _, _ = load_case("packed_three_groups_flex")
    return case


@pytest.fixture()
def grouped(three_groups) -> dict:
    return copy.deepcopy(three_groups["grouped_datasets"])


@pytest.fixture()
def info(three_groups) -> dict:
    return absolute_dataset_info(three_groups)
