"""Running the reference's conformance cases (tests/conformance) and comparing as its README says."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data._utils import worker as worker_module

from bagel_data import make_bagel_multimodal_dataset

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"
GOLDEN_CASES = CONFORMANCE / "cases"


def case_names(kind: str) -> list[str]:
    return sorted(p.name for p in GOLDEN_CASES.iterdir() if p.name.startswith(kind + "_"))


def compat_case_names(kind: str) -> list[str]:
    """The `compat_<kind>_*` cases: their case.json has `"compat": "bagel"`."""
    return case_names(f"compat_{kind}")


def case_runs(kind: str) -> list[tuple[str, str | None]]:
    """(case, compat mode) for every run of a kind: each older case in the default mode and
    with compat="bagel", each compat case with the compat its case.json names."""
    older = case_names(kind)
    compat = [
        (name, json.loads((GOLDEN_CASES / name / "case.json").read_text())["compat"])
        for name in compat_case_names(kind)
    ]
    return [(name, None) for name in older] + [(name, "bagel") for name in older] + compat


def all_case_folders() -> list[str]:
    return sorted(p.name for p in GOLDEN_CASES.iterdir() if p.is_dir())


def load_case(name: str) -> tuple[dict, dict, dict | None]:
    folder = GOLDEN_CASES / name
    case = json.loads((folder / "case.json").read_text())
    expected = json.loads((folder / "expected.json").read_text())
    arrays = np.load(folder / "expected.npz") if (folder / "expected.npz").exists() else None
    return case, expected, arrays


def skip_without_requirement(case: dict) -> None:
    """Skip a case made with a reader the project only uses when installed (`requires`:
    "decord", the `compat` extra), saying what to install; run it wherever it is."""
    if case.get("requires") == "decord":
        from bagel_data.media.video_reference import decord_module

        if decord_module() is None:
            pytest.skip(f'{case["name"]} needs decord: pip install "bagel-data[compat]" (CI installs it)')


def absolute_dataset_info(case: dict) -> dict:
    root = (GOLDEN_CASES / case["name"] / case["data_root"]).resolve()
    info = {}
    for group, datasets in case["dataset_info"].items():
        info[group] = {}
        for name, meta in datasets.items():
            info[group][name] = {
                key: str(root / value) if key in ("data_dir", "jsonl_path", "parquet_info_path") else value
                for key, value in meta.items()
            }
    return info


def reference_file_order(case: dict) -> dict:
    """Group keys that reproduce the reference's parquet listing where it matters.

    When `num_used_data` is not a multiple of a folder's file count, the listing order
    decides which files repeat. The reference used `os.listdir` order; we sort by default
    (SPEC 8.5), so such a case is run with `file_order: filesystem`, which equals the
    reference only on a filesystem that lists the folder as the reference's did.
    """
    group = case.get("group")
    groups = [group] if group else list(case["grouped_datasets"])
    for name in groups:
        args = case["grouped_datasets"][name]
        if name == "vlm_sft":
            continue
        info = case["dataset_info"][name][args["dataset_names"][0]]
        if args["num_used_data"][0] % info["num_files"]:
            return {"file_order": "filesystem"}
    return {}


@contextlib.contextmanager
def as_worker(worker_id, num_workers):
    """Make `torch.utils.data.get_worker_info()` report this worker, as a DataLoader would."""
    if worker_id is None:
        yield
        return
    worker_module._worker_info = worker_module.WorkerInfo(id=worker_id, num_workers=num_workers, seed=0, dataset=None)
    try:
        yield
    finally:
        worker_module._worker_info = None


def digest(tensor: torch.Tensor) -> str:
    array = tensor.detach().cpu().numpy().astype("<f4", copy=False)
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def batch_field_summary(value):
    """A packed batch's field as the workers cases store it: a tensor as [shape, digest], a
    list of tensors item by item, a latent shape (a tuple) as a list, anything else as is."""
    if isinstance(value, torch.Tensor):
        return [list(value.shape), digest(value)]
    if isinstance(value, list) and value and isinstance(value[0], (torch.Tensor, tuple)):
        return [batch_field_summary(item) for item in value]
    if isinstance(value, tuple):  # a latent shape: JSON has lists
        return list(value)
    return value


def check_tensor(field: str, got: torch.Tensor, summary: dict, reference: np.ndarray | None) -> None:
    assert list(got.shape) == summary["shape"], f"{field}: shape {list(got.shape)} != {summary['shape']}"
    if "dtype" in summary:
        assert str(got.dtype).replace("torch.", "") == summary["dtype"], f"{field}: dtype {got.dtype}"
    if digest(got) == summary["sha256"]:
        return
    assert reference is not None, f"{field}: digest differs and the case stores no array"
    if got.dtype.is_floating_point:
        difference = np.abs(got.numpy().astype(np.float64) - reference.astype(np.float64))
        finite = np.isfinite(reference)
        assert np.array_equal(np.isfinite(got.numpy()), finite), f"{field}: infinities differ"
        worst = float(difference[finite].max()) if finite.any() else 0.0
        assert worst <= 1e-6, f"{field}: max |a - b| = {worst}"
    else:
        np.testing.assert_array_equal(got.numpy(), reference, err_msg=field)


def first_packs(case, info, tokenizer, special_tokens, count):
    """(the first `count` packs, the dataset) of a case's packed config over `info`."""
    dataset = make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=case["grouped_datasets"],
        dataset_info=info,
        num_workers=1,
        data_seed=case["data_seed"],
        **case["packing"],
    )
    return list(itertools.islice(iter(dataset), count)), dataset
