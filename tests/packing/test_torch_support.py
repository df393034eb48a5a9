"""The run-time check of the torch / torchdata internals bagel-data relies on."""

from __future__ import annotations

import pytest
import torch

from bagel_data.packing.torch_support import (
    MIN_TORCH,
    MIN_TORCHDATA,
    UnsupportedTorchError,
    check_torch,
    missing_internals,
)


@pytest.fixture(autouse=True)
def fresh_check():
    check_torch.cache_clear()
    yield
    check_torch.cache_clear()


def test_the_installed_torch_has_everything():
    assert missing_internals() == []
    check_torch()


def test_a_torch_without_shared_storages_is_named_with_the_versions_needed(monkeypatch):
    monkeypatch.delattr(torch.storage._StorageBase, "_new_shared")  # where UntypedStorage inherits it from
    assert missing_internals() == ["torch.UntypedStorage._new_shared (shared-memory batch segments)"]
    with pytest.raises(UnsupportedTorchError) as caught:
        check_torch()
    message = str(caught.value)
    assert f"torch>={MIN_TORCH} and torchdata>={MIN_TORCHDATA}" in message
    assert f"this torch ({torch.__version__})" in message and "_new_shared" in message


def test_a_missing_worker_seed_function_is_named(monkeypatch):
    import torch.utils.data._utils.worker as worker

    monkeypatch.delattr(worker, "_generate_state")
    assert missing_internals() == [
        "torch.utils.data._utils.worker._generate_state (DataLoader worker seeds (compat='bagel'))"
    ]
    with pytest.raises(UnsupportedTorchError, match="_generate_state"):
        check_torch()
