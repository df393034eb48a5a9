"""A pytest plugin for scripts/mutate.py: how long each test takes, and which tests start a
process (DataLoader workers).

Coverage's per-test contexts do not follow code into a forked DataLoader worker, so a line
that only a worker runs looks untested. The mutation harness therefore also runs, for every
mutant that survives its selected tests, the tests this plugin saw starting a process. The
durations let it run the fastest tests first, so that most mutants die in a second.
At the end of the session it writes {"process_tests": [...], "durations": {id: s}} (JSON)
to $BAGEL_MUTATION_PROBE.
"""

from __future__ import annotations

import json
import multiprocessing.process
import os

_current_test: list[str] = [""]
_starters: set[str] = set()
_durations: dict[str, float] = {}
_original_start = multiprocessing.process.BaseProcess.start


def _recording_start(self):
    _starters.add(_current_test[0])
    return _original_start(self)


def pytest_configure(config):
    multiprocessing.process.BaseProcess.start = _recording_start  # type: ignore[method-assign]


def pytest_runtest_logstart(nodeid, location):
    _current_test[0] = nodeid


def pytest_runtest_logreport(report):
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("BAGEL_MUTATION_PROBE")
    if path:
        with open(path, "w") as f:
            json.dump({"process_tests": sorted(t for t in _starters if t), "durations": _durations}, f)
