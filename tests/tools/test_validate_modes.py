"""`validate` works in both modes (issue 40): on the repository's run configs and on every
conformance case, with and without `compat="bagel"`, it reports on every group instead of
stopping on an internal error, and the reference mode warns about CFG where the default does.

The repository's configs are validated as shipped, from a copy of their folder, against a
small generated dataset in the place and under the names they expect: `configs/example_run.yaml`
(with the example's dataset_info filled in), `benchmarks/bagel_run.yaml` (its `../bench_data`
written with the benchmark's transforms) and the run config `bagel-data demo` writes.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml
from PIL import Image
from typer.testing import CliRunner

from bagel_data.cli.main import DEMO_PACKING, app
from bagel_data.synthetic.dataset import write_demo_dataset
from bagel_data.synthetic.sizes import DemoSizes, ImageSize, ParquetSizes, VlmSizes
from bagel_data.tools.run import RunConfig, load_run_config
from bagel_data.tools.validate import validate_config
from helpers.golden import GOLDEN_CASES, absolute_dataset_info, all_case_folders, reference_file_order
from helpers.interleaved import write_interleaved

REPO = Path(__file__).resolve().parents[2]
SAMPLE = 2  # rows per group: the modes are what is under test here, not the data
PICTURE = ImageSize(48 * 48, 96 * 96, 1.5, 32, 128)


def tiny(sizes: DemoSizes) -> DemoSizes:
    """`sizes`' transforms over a handful of small rows (the configs' data, quick to write)."""
    vlm = VlmSizes(rows=6, image=PICTURE, video_rows=0, video_size=(64, 48), video_frames=16, folder_frames=(12, 14))
    return dataclasses.replace(
        sizes,
        t2i=ParquetSizes(2, 1, 3, PICTURE, (1, 2)),
        edit=ParquetSizes(2, 1, 2, PICTURE, (2, 3)),
        vlm=vlm,
    )


@pytest.fixture(scope="module")
def repository_config_paths(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("repo")
    demo = write_demo_dataset(root / "demo_data", tiny(DemoSizes.demo()))
    (demo.root / "run.yaml").write_text(  # as `bagel-data demo` writes it
        yaml.safe_dump(
            {"grouped_datasets": "grouped_datasets.yaml", "dataset_info": "dataset_info.yaml", "packing": DEMO_PACKING}
        )
    )
    write_demo_dataset(root / "bench_data", tiny(DemoSizes.bench()))
    shutil.copytree(REPO / "benchmarks", root / "benchmarks", ignore=shutil.ignore_patterns("*.json", "*.md"))
    shutil.copytree(REPO / "configs", root / "configs")
    demo_info = yaml.safe_load(demo.dataset_info.read_text())
    example_names = {"t2i_pretrain": "t2i", "unified_edit": "edit", "vlm_sft": "vlm"}
    example_info = yaml.safe_load((root / "configs" / "example_dataset_info.yaml").read_text())
    filled = {
        group: {name: demo_info[group][example_names[group]] for name in datasets}
        for group, datasets in example_info.items()
    }
    (root / "configs" / "example_dataset_info.yaml").write_text(yaml.safe_dump(filled))
    return {
        "configs/example_run.yaml": root / "configs" / "example_run.yaml",
        "benchmarks/bagel_run.yaml": root / "benchmarks" / "bagel_run.yaml",
        "demo_data/run.yaml": demo.root / "run.yaml",
    }


def case_config(name: str) -> tuple[RunConfig, int, int]:
    """A conformance case as a run config, with its world size and worker count."""
    case = json.loads((GOLDEN_CASES / name / "case.json").read_text())
    grouped = copy.deepcopy(case["grouped_datasets"])
    for args in grouped.values():
        args.update(reference_file_order(case))
        if case["kind"] == "stream":  # one family read alone: as a run config, its group is drawn
            args["weight"] = 1
    packing = {**case.get("packing", {}), "data_seed": case["data_seed"]}
    config = RunConfig(grouped, absolute_dataset_info(case), packing)
    return config, case["world_size"], case["num_workers"] or 1


def in_mode(config: RunConfig, compat: str | None) -> RunConfig:
    return dataclasses.replace(config, compat=compat)


def check_both_modes(config: RunConfig, tokenizer, world_size: int = 1, num_workers: int = 1) -> None:
    reports = {
        mode: validate_config(
            in_mode(config, mode), world_size=world_size, num_workers=num_workers, sample=SAMPLE, tokenizer=tokenizer
        )
        for mode in (None, "bagel")
    }
    for mode, report in reports.items():
        where = f"compat={mode}"
        assert not [e for e in report.errors if e.startswith("configuration:")], (where, report.errors)
        assert set(report.groups) == set(config.grouped_datasets), where
        for group in report.groups.values():
            assert group.rows_checked > 0, (where, group.name)
    cfg_groups = {
        mode: sorted(w.split(":")[0] for w in r.warnings if "CFG dropout" in w) for mode, r in reports.items()
    }
    assert cfg_groups["bagel"] == cfg_groups[None]


@pytest.mark.parametrize("name", ["configs/example_run.yaml", "benchmarks/bagel_run.yaml", "demo_data/run.yaml"])
def test_validate_takes_the_repository_configs_in_both_modes(repository_config_paths, name, tokenizer):
    check_both_modes(load_run_config(str(repository_config_paths[name])), tokenizer)


def test_the_command_takes_a_run_config_with_compat_bagel(repository_config_paths):
    """The issue's report: `bagel-data validate` on a run config with `compat: bagel` exited 3."""
    demo = repository_config_paths["demo_data/run.yaml"]
    compat = demo.with_name("run_compat.yaml")
    compat.write_text(demo.read_text() + "compat: bagel\n")
    result = CliRunner().invoke(app, ["validate", str(compat), "--sample", str(SAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.output)["groups"]) == {"t2i_pretrain", "unified_edit", "vlm_sft"}


@pytest.mark.parametrize("name", all_case_folders())
def test_validate_takes_every_conformance_case_in_both_modes(name, tokenizer):
    config, world_size, num_workers = case_config(name)
    check_both_modes(config, tokenizer, world_size, num_workers)


def test_the_cfg_warning_is_given_in_both_modes(tmp_path, tokenizer):
    """The reference mode walks a group's first samples for the CFG check as the default
    mode does (they start the reference stream, not assume one): an understanding-only
    interleaved group whose question image CFG may drop is warned about in both."""
    shards = tmp_path / "docs"
    shards.mkdir()
    Image.new("RGB", (40, 30), (200, 30, 30)).save(shards / "q.png")
    doc = [
        {"type": "image", "path": "q.png", "understood": True},
        {"type": "text", "text": "what colour is it?"},
        {"type": "text", "text": "red", "supervised": True},
    ]
    write_interleaved(shards / "part-0.parquet", [[doc] * 4])
    group = {
        "dataset_names": ["docs"],
        "num_used_data": [1],
        "weight": 1,
        "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32},
        "vit_image_transform_args": {"image_stride": 14, "max_image_size": 56, "min_image_size": 28},
    }
    config = RunConfig(
        {"interleaved": group},
        {"interleaved": {"docs": {"data_dir": str(shards)}}},
        {"vit_cond_dropout_prob": 0.3},
    )
    for mode in (None, "bagel"):
        report = validate_config(in_mode(config, mode), sample=SAMPLE, tokenizer=tokenizer)
        assert report.ok, (mode, report.errors)
        cfg = [w for w in report.warnings if "CFG dropout" in w]
        assert len(cfg) == 1 and cfg[0].startswith("interleaved:") and "vit_image" in cfg[0], (mode, report.warnings)
