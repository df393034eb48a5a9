"""docs/extending.md works as written: its family file, run.yaml and train.py, run as they are."""

from __future__ import annotations

import itertools
import re
import runpy
from pathlib import Path

import torch
import yaml

from bagel_data.tools.run import load_run_config
from bagel_data.tools.validate import validate_config
from helpers.batches import assert_same_batch
from helpers.builders import png_bytes, write_parquet

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def _block(name: str) -> str:
    match = re.search(rf"<!-- {re.escape(name)} -->\n```\w+\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert match, f"docs/extending.md has no block for {name}"
    return match.group(1)


def _write_data(folder: Path) -> None:
    folder.mkdir()
    for part in range(2):
        groups = [
            [
                {
                    "image": png_bytes(64, 48, (part * 90, g * 60, i * 40)),
                    "question": f"What colour is picture {part}-{g}-{i}?",
                    "answers": [] if (part, g, i) == (1, 0, 2) else [f"colour {i}", f"shade {i}"],
                }
                for i in range(4)
            ]
            for g in range(2)
        ]
        write_parquet(folder / f"part-{part}.parquet", groups, {})


def test_the_worked_example_runs_and_resumes(tmp_path, monkeypatch):
    for name in ("my_family.py", "run.yaml", "train.py"):
        (tmp_path / name).write_text(_block(name), encoding="utf-8")
    _write_data(tmp_path / "vqa_data")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    script = runpy.run_path(str(tmp_path / "train.py"))
    try:
        straight = list(itertools.islice(script["make_loader"](), 6))
        resumed = script["make_loader"]()
        resumed.load_state_dict(torch.load(tmp_path / "data_state.pt", weights_only=False))
        for i, batch in enumerate(itertools.islice(resumed, 3)):
            assert_same_batch(batch, straight[3 + i], f"batch {3 + i}")
    finally:
        # train.py's loaders live in its globals, which its functions point back to: left to
        # the cycle collector, each loader's workers wait out torch's 5 s status interval
        # before they are stopped. Freed here by reference count, they stop at once.
        script["make_loader"].__globals__.clear()
    report = validate_config(script["config"], num_workers=2)
    assert not [w for w in report.warnings if "understanding only" in w], report.warnings
    assert report.groups["my_vqa"].skips == {"parse_row_failed": 1}
    assert "part-1.parquet, row group 0, row 2" in report.groups["my_vqa"].examples["parse_row_failed"]
    assert yaml.safe_load(_block("run.yaml"))["grouped_datasets"]["my_vqa"]["dataset_class"] == "my_family:VQAFamily"


def test_validate_warns_when_the_example_leaves_cfg_on(tmp_path, monkeypatch):
    """The example as it was: its image with CFG on, so vit dropout (0.4 by default) drops
    the image that the answer is about."""
    family = _block("my_family.py").replace(
        ", enable_cfg=False)\n        data = self.add_text", ")\n        data = self.add_text"
    )
    assert family != _block("my_family.py")
    (tmp_path / "cfg_on_family.py").write_text(family, encoding="utf-8")
    (tmp_path / "run.yaml").write_text(_block("run.yaml").replace("my_family:", "cfg_on_family:"), encoding="utf-8")
    _write_data(tmp_path / "vqa_data")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    report = validate_config(load_run_config(str(tmp_path / "run.yaml")), num_workers=2)
    warnings = [w for w in report.warnings if "understanding only" in w]
    assert len(warnings) == 1 and "vit_image" in warnings[0] and "vit_cond_dropout_prob=0.4" in warnings[0]
