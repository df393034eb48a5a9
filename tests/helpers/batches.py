"""Comparing batches in tests."""

from __future__ import annotations

import torch


def assert_same_batch(a, b, where: str) -> None:
    a, b = a.to_dict(), b.to_dict()
    assert a.keys() == b.keys(), where
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y), f"{where}: {key}"
        elif isinstance(x, list) and x and isinstance(x[0], torch.Tensor):
            assert len(x) == len(y) and all(torch.equal(p, q) for p, q in zip(x, y)), f"{where}: {key}"
        else:
            assert x == y, f"{where}: {key}"
