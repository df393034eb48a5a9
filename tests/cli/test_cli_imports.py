"""`bagel-data --help` answers at once: the help of every command imports no torch, pyarrow,
PIL or numpy (torch alone cost 1.4 CPU seconds before the CLI imported it lazily)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "pyarrow", "PIL", "numpy", "matplotlib")

# Run as the console script does (`bagel_data.cli:main`) in a fresh interpreter, so that
# nothing a test imported earlier hides an import the help would make.
PROBE = f"""
HEAVY = {HEAVY!r}
import json, sys
sys.argv = ["bagel-data", *sys.argv[1:]]
from bagel_data.cli import main
try:
    main()
except SystemExit as exit:
    code = exit.code
print(json.dumps({{"code": code, "heavy": [m for m in HEAVY if m in sys.modules]}}))
"""


@pytest.mark.parametrize(
    "args",
    [["--help"], ["prepare", "--help"], ["prepare", "t2i", "--help"], ["run", "--help"], ["bench", "--help"]],
    ids=" ".join,
)
def test_help_imports_no_heavy_module(args):
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None)
    assert result["heavy"] == []
