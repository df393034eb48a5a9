"""Every case folder is run by a golden test: a new or renamed case cannot be skipped silently."""

from __future__ import annotations

from helpers.golden import GOLDEN_CASES, all_case_folders, case_runs


def test_every_case_folder_is_run():
    run = {name for kind in ("stream", "packed") for name, _ in case_runs(kind)}
    folders = all_case_folders()
    assert folders, f"no case folders under {GOLDEN_CASES}"
    assert set(folders) == run, f"not run: {sorted(set(folders) - run)}; unknown: {sorted(run - set(folders))}"


def test_every_case_runs_in_both_modes():
    for kind in ("stream", "packed"):
        runs = case_runs(kind)
        for name, _ in runs:
            modes = {compat for other, compat in runs if other == name}
            expected = {"bagel"} if name.startswith("compat_") else {None, "bagel"}
            assert modes == expected, (name, modes)


def test_compat_cases_exist():
    names = [name for kind in ("stream", "packed") for name, _ in case_runs(kind) if name.startswith("compat_")]
    assert len(set(names)) >= 4, names
