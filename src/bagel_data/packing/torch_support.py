"""The torch and torchdata this package needs, checked when a packed dataset starts.

bagel-data declares `torch>=2.2` and `torchdata>=0.10` (pyproject.toml) and is tested with the
versions the Makefile pins. Pip keeps a torch you already have when it meets that floor, so
the package installs into a training environment without replacing its CUDA build. Three
things it uses are not public API, so a torch or torchdata outside the tested range could
lack them; `check_torch` looks for each and fails with one message naming what is missing:

* `torch.UntypedStorage._new_shared`: the shared-memory segments a DataLoader worker writes
  its batch into (packing/segments.py, packing/buffers.py);
* `torch.utils.data._utils.worker._generate_state`: the numpy seed torch gives a worker, which
  `compat="bagel"` reproduces (compat.py);
* `torchdata.stateful_dataloader.StatefulDataLoader` (torchdata 0.8 and later) and the layout
  of its `state_dict()` (checkpoint/collect.py; tests/checkpoint fail if a release moves it).

Reusing segments also needs storage use counts and PyObject preservation; those are probed
separately (`segments.recycling_supported`) and, when absent, each batch gets a fresh
segment: slower, same values.
"""

from __future__ import annotations

import functools
import importlib

from ..errors import BagelDataError

MIN_TORCH = "2.2"
MIN_TORCHDATA = "0.10"

# (module, attribute path, what bagel-data uses it for)
_INTERNALS = (
    ("torch", "UntypedStorage._new_shared", "shared-memory batch segments"),
    ("torch.utils.data._utils.worker", "_generate_state", "DataLoader worker seeds (compat='bagel')"),
    ("torchdata.stateful_dataloader", "StatefulDataLoader", "resumable DataLoader"),
)


class UnsupportedTorchError(BagelDataError, ImportError):
    """The installed torch or torchdata lacks something bagel-data relies on."""


def missing_internals() -> list[str]:
    """`module.attribute (use)` for each internal this torch / torchdata lacks."""
    missing = []
    for module_name, path, use in _INTERNALS:
        try:
            found: object = importlib.import_module(module_name)
            for name in path.split("."):
                found = getattr(found, name)
        except (ImportError, AttributeError):
            missing.append(f"{module_name}.{path} ({use})")
    return missing


@functools.cache
def check_torch() -> None:
    """Raise `UnsupportedTorchError` naming every missing internal and the versions needed."""
    missing = missing_internals()
    if missing:
        raise UnsupportedTorchError(
            f"this torch ({_version('torch')}) / torchdata ({_version('torchdata')}) lacks "
            f"{'; '.join(missing)}: bagel-data needs torch>={MIN_TORCH} and torchdata>={MIN_TORCHDATA} "
            "(see README, 'Installing into your training environment')"
        )


def _version(package: str) -> str:
    try:
        return str(importlib.import_module(package).__version__)
    except (ImportError, AttributeError):
        return "not installed"
