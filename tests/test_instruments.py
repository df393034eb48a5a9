"""The seams (`bagel_data.instruments`): a marked function runs as it is while nothing is
attached; an attached instrument sees each call and gives its result; blocks nest and undo."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bagel_data import instruments
from bagel_data.instruments import SEAMS, STAGES, attached, seam

PACKAGE = Path(instruments.__file__).resolve().parent


@seam("tokenize")
def _double(value, *, extra=0):
    return 2 * value + extra


def _recording(log: list, name: str):
    def instrument(call, args, kwargs):
        log.append((name, args, kwargs))
        return call(*args, **kwargs)

    return instrument


def test_a_marked_function_runs_as_it_is_while_nothing_is_attached():
    assert _double(3, extra=1) == 7 and _double.__wrapped__(3) == 6
    assert _double.__name__ == "_double" and all(point.instrument is None for point in SEAMS.values())


def test_an_attached_instrument_sees_the_call_and_gives_its_result_for_the_block_only():
    log: list = []
    with attached({"tokenize": _recording(log, "a")}):
        assert _double(3, extra=1) == 7
    with attached({"tokenize": lambda call, args, kwargs: "stood in"}):
        assert _double(3) == "stood in"
    assert _double(3) == 6 and log == [("a", (3,), {"extra": 1})]
    assert SEAMS["tokenize"].instrument is None


def test_other_stages_are_left_alone():
    log: list = []
    with attached({"decode": _recording(log, "decode")}):
        assert _double(1) == 2
    assert log == []


def test_nested_blocks_compose_the_last_entered_outermost_and_each_undoes_its_own():
    log: list = []
    with attached({"tokenize": _recording(log, "outer block")}):
        with attached({"tokenize": _recording(log, "inner block")}):
            assert _double(2) == 4
        assert _double(5) == 10
    assert [name for name, _, _ in log] == ["inner block", "outer block", "outer block"]
    assert SEAMS["tokenize"].instrument is None


def test_a_block_left_by_an_exception_detaches():
    with pytest.raises(RuntimeError), attached({"tokenize": _recording([], "x")}):
        raise RuntimeError("inside")
    assert SEAMS["tokenize"].instrument is None


def test_an_unknown_stage_is_named_with_the_stages_there_are():
    for make in (lambda: seam("decoding"), lambda: attached({"decoding": _recording([], "x")}).__enter__()):
        with pytest.raises(ValueError, match=r"no pipeline stage 'decoding': the stages are open, read, decode"):
            make()


def test_every_stage_is_marked_in_the_library():
    marked = set()
    for path in PACKAGE.rglob("*.py"):
        marked |= set(re.findall(r'^\s*@seam\("(\w+)"\)', path.read_text(), flags=re.MULTILINE))
    assert marked == set(STAGES)
