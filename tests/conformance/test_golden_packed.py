"""Every `packed_*` golden case: the first packed batches, through every public entrance."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from bagel_data.packing.invariants import check_batch
from helpers.doors import DOORS, build_through
from helpers.golden import absolute_dataset_info, as_worker, case_runs, check_tensor, load_case, reference_file_order

PLAIN_FIELDS = ("sequence_length", "sample_lens", "split_lens", "attn_modes", "batch_data_indexes")


def build_packed(case: dict, tokenizer, special_tokens, compat=None, door=DOORS[0]):
    """The case's packed dataset through `door`; compat="bagel" implies the reference's
    listing order."""
    order = reference_file_order(case) if compat is None else {}
    grouped = {
        name: dict(args, **order) if name != "vlm_sft" else dict(args)
        for name, args in case["grouped_datasets"].items()
    }
    settings = dict(case["packing"], data_seed=case["data_seed"], compat=compat)
    if case.get("compat_seed") is not None:
        settings["compat_seed"] = case["compat_seed"]
    return build_through(
        door,
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped=grouped,
        info=absolute_dataset_info(case),
        settings=settings,
        rank=case["rank"],
        world_size=case["world_size"],
        num_workers=case["num_workers"],
        data_status=case["data_status"],
    )


def check_timesteps(index: int, batch: dict, want: dict, arrays) -> None:
    """Finite timesteps sit exactly where the case has them, one value per VAE image."""
    summary = want.get("packed_timesteps_is_finite")
    if summary is None:
        assert "packed_timesteps" not in batch
        return
    timesteps = batch["packed_timesteps"]
    assert timesteps.dtype == torch.float32
    assert list(timesteps.shape) == summary["shape"]
    finite = torch.isfinite(timesteps).numpy()
    key = f"b{index}/packed_timesteps_is_finite"
    if arrays is not None and key in arrays:
        np.testing.assert_array_equal(finite, arrays[key])
    # Loss-bearing VAE tokens are exactly the finite ones.
    loss_positions = set(batch["mse_loss_indexes"].tolist())
    expected = np.array([p in loss_positions for p in batch["packed_vae_token_indexes"].tolist()])
    np.testing.assert_array_equal(finite, expected)
    start = 0
    for h, w in batch["patchified_vae_latent_shapes"]:
        values = timesteps[start : start + h * w]
        assert len(set(values.tolist())) == 1, "one timestep per VAE image"
        start += h * w


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(("name", "compat"), case_runs("packed"))
def test_packed_case(name, compat, door, tokenizer, special_tokens):
    case, expected, arrays = load_case(name)
    assert case.get("compat") == (compat if name.startswith("compat_") else None)
    dataset = build_packed(case, tokenizer, special_tokens, compat, door)
    with as_worker(case["worker_id"], case["num_workers"]):
        batches = list(itertools.islice(iter(dataset), case["count"]))
    assert len(batches) == len(expected["batches"])
    for batch in batches:
        check_batch(batch, dataset.config, dataset.special_tokens)
    for index, (batch, want) in enumerate(zip(batches, expected["batches"])):
        expected_keys = set(want) - {"packed_timesteps_is_finite"}
        if "packed_timesteps_is_finite" in want:
            expected_keys.add("packed_timesteps")
        assert set(batch) == expected_keys, f"batch {index}: keys"
        for field, value in want.items():
            where = f"batch {index} {field}"
            if field == "packed_timesteps_is_finite":
                check_timesteps(index, batch, want, arrays)
            elif field == "patchified_vae_latent_shapes":
                assert [list(shape) for shape in batch[field]] == value, where
            elif field in PLAIN_FIELDS:
                assert batch[field] == value, where
            elif field == "nested_attention_masks":
                assert len(batch[field]) == len(value), where
                for j, (mask, summary) in enumerate(zip(batch[field], value)):
                    key = f"b{index}/nested_attention_masks/{j}"
                    reference = None
                    if arrays is not None and key in arrays:
                        reference = np.where(arrays[key], 0.0, -np.inf).astype(np.float32)
                    check_tensor(f"{where}[{j}]", mask, summary, reference)
            else:
                key = f"b{index}/{field}"
                reference = arrays[key] if arrays is not None and key in arrays else None
                check_tensor(where, batch[field], value, reference)
