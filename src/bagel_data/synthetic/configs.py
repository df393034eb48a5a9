"""The synthetic dataset's ``dataset_info.yaml`` and ``grouped_datasets.yaml``: where each
dataset lies, and how the three groups mix and transform their images."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from .sizes import DemoSizes

DATASET_NAMES = {"t2i_pretrain": "t2i", "unified_edit": "edit", "vlm_sft": "vlm"}


@dataclass(frozen=True)
class DemoPaths:
    """Where :func:`write_demo_dataset` put things (all absolute)."""

    root: Path
    dataset_info: Path
    grouped_datasets: Path
    t2i_dir: Path
    edit_dir: Path
    vlm_jsonl: Path
    vlm_image_dir: Path

    @property
    def parquet_info(self) -> Path:
        return self.edit_dir / "parquet_info.json"


def _transform(args: tuple[int, ...]) -> dict[str, int]:
    return dict(zip(("image_stride", "max_image_size", "min_image_size", "max_pixels"), args))


def write_configs(paths: DemoPaths, s: DemoSizes) -> None:
    paths.dataset_info.write_text(yaml.safe_dump(_dataset_info(paths, s), sort_keys=False))
    paths.grouped_datasets.write_text(yaml.safe_dump(_grouped_datasets(s), sort_keys=False))


def _dataset_info(paths: DemoPaths, s: DemoSizes) -> dict:
    """Where each of the three datasets lies and how many files and samples it holds."""
    t2i, edit, vlm = DATASET_NAMES.values()
    return {
        "t2i_pretrain": {
            t2i: {"data_dir": str(paths.t2i_dir), "num_files": s.t2i.files, "num_total_samples": s.t2i.rows}
        },
        "unified_edit": {
            edit: {
                "data_dir": str(paths.edit_dir),
                "num_files": s.edit.files,
                "num_total_samples": s.edit.rows,
                "parquet_info_path": str(paths.parquet_info),
            }
        },
        "vlm_sft": {
            vlm: {
                "data_dir": str(paths.vlm_image_dir),
                "jsonl_path": str(paths.vlm_jsonl),
                "num_files": 1,
                "num_total_samples": s.vlm.rows,
            }
        },
    }


def _grouped_datasets(s: DemoSizes) -> dict:
    """The three groups: their weights, which is mandatory, and their image transforms."""
    t2i, edit, vlm = DATASET_NAMES.values()
    tr = s.transforms
    return {
        "t2i_pretrain": {
            "dataset_names": [t2i],
            "image_transform_args": _transform(tr.vae),
            "is_mandatory": True,
            "num_used_data": [s.t2i.files],
            "weight": 0.5,
        },
        "unified_edit": {
            "dataset_names": [edit],
            "image_transform_args": _transform(tr.vae),
            "vit_image_transform_args": _transform(tr.vit),
            "is_mandatory": False,
            "num_used_data": [s.edit.files],
            "weight": 0.3,
        },
        "vlm_sft": {
            "dataset_names": [vlm],
            "image_transform_args": _transform(tr.vlm),
            "frame_sampler_args": {"max_num_frames": tr.frames[0], "min_num_frames": tr.frames[1]},
            "is_mandatory": False,
            "shuffle_lines": True,
            "shuffle_seed": 0,
            "num_used_data": [s.vlm.rows],
            "weight": 0.2,
        },
    }
