"""`bagel-data prepare FORMAT` and the Python `prepare_FORMAT` give the same shards by
default: every option they share has the same default in both."""

from __future__ import annotations

import inspect

import pytest

from bagel_data.cli import tools as cli_tools
from bagel_data.tools.prepare import sharded
from bagel_data.tools.prepare.edit import prepare_edit
from bagel_data.tools.prepare.interleaved import prepare_interleaved
from bagel_data.tools.prepare.t2i import prepare_t2i
from bagel_data.tools.prepare.vlm import prepare_vlm


def defaults(function) -> dict:
    return {
        name: parameter.default
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }


@pytest.mark.parametrize(
    ("command", "function"),
    [
        (cli_tools.t2i_command, prepare_t2i),
        (cli_tools.edit_command, prepare_edit),
        (cli_tools.vlm_command, prepare_vlm),
        (cli_tools.interleaved_command, prepare_interleaved),
    ],
)
def test_the_command_and_the_function_share_their_defaults(command, function):
    cli, api = defaults(inspect.unwrap(command)), defaults(function)
    shared = sorted(set(cli) & set(api))
    assert shared, "the two share options"
    assert {name: cli[name] for name in shared} == {name: api[name] for name in shared}


@pytest.mark.parametrize(
    ("plan", "function"),
    [(sharded._t2i, prepare_t2i), (sharded._edit, prepare_edit), (sharded._vlm, prepare_vlm),
     (sharded._interleaved, prepare_interleaved)],
)  # fmt: skip
def test_the_sharded_engine_and_the_function_share_their_defaults(plan, function):
    """`prepare_sharded(kind, ...)` (what the CLI runs, `--engine local` or `ray`) plans with
    the same defaults as `prepare_<kind>`."""
    engine, api = defaults(plan), defaults(function)
    shared = sorted(set(engine) & set(api))
    assert shared, "the two share options"
    assert {name: engine[name] for name in shared} == {name: api[name] for name in shared}
