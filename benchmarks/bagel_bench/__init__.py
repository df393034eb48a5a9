"""The benchmark of bagel-data: the pipeline timed against the cost of its image work.

A package of its own, outside the library and its wheel (`pip install -e ./benchmarks`);
`bagel-data bench` runs it where it is installed (`cli.py`, one table of subcommands).
`main` runs the benchmark; `floor` times the unavoidable work; `runs` times whole runs in
child processes; `fast` measures the opt-in approximate paths. Its instruments
(`profiler`, `recorder`) attach to the seams the library declares (`bagel_data.instruments`).
"""

from __future__ import annotations

import os
from pathlib import Path


def child_env(first: str | None = None) -> dict[str, str]:
    """This environment, with a PYTHONPATH under which a child interpreter imports this very
    `bagel_bench` and `bagel_data` (or, given `first`, the `bagel_data` of that source tree):
    the benchmark may run from a checkout without being installed."""
    import bagel_data

    here = str(Path(__file__).resolve().parents[1])
    library = first or str(Path(bagel_data.__file__).resolve().parents[1])
    entries = [library, here, os.environ.get("PYTHONPATH")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(entry for entry in entries if entry)}
