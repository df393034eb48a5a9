"""Every `bagel_data.nemo` submodule has every public name of NeMo AutoModel 0.7.0's, or
docs/coming_from.md lists it as left out and says why.

`NEMO_NAMES` was written from NVIDIA-NeMo/Automodel's
`nemo_automodel/components/datasets/multimodal/` sources: per submodule, the classes,
functions and module-level values it defines (imported modules such as `torch` and
`decord` aside, but names a submodule imports from a sibling and code reaches through it,
such as `datasets.UnifiedEditIterableDataset` and `loader.bagel_packed_collate_fn`, in).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NEMO_NAMES = {
    "collate_fns": ["SimpleCustomBatch", "bagel_packed_collate_fn", "collate_wrapper"],
    "datasets": [
        "BagelDatasetConfig", "DATASET_REGISTRY", "DEFAULT_DATASET_INFO", "SftJSONLIterableDataset",
        "T2IIterableDataset", "UnifiedEditIterableDataset", "logger", "make_bagel_multimodal_dataset",
    ],
    "distributed_iterable": ["DistributedIterableDataset", "logger"],
    "interleave": [
        "InterleavedBaseIterableDataset", "ParquetStandardIterableDataset", "UnifiedEditIterableDataset", "logger",
    ],
    "loader": ["BagelDataloaderBuild", "BagelDataloaderConfig", "bagel_packed_collate_fn"],
    "packing": ["DataConfig", "PackedDataset", "logger"],
    "parquet_utils": [
        "get_hdfs_block_size", "get_hdfs_extra_conf", "get_hdfs_host", "get_parquet_data_paths", "hdfs_ls_cmd",
        "init_arrow_pf_fs", "logger",
    ],
    "transforms": ["ImageTransform", "MaxLongEdgeMinShortEdgeResize"],
    "utils": [
        "add_special_tokens", "get_flattened_position_ids_extrapolate", "get_flattened_position_ids_interpolate",
        "len2weight", "patchify", "pil_img2rgb", "prepare_attention_mask_per_sample", "split_integer_exp_decay",
    ],
    "video": [
        "FrameSampler", "extract_frame_number", "get_frame_indices", "read_frames_decord", "read_frames_folder",
        "sort_frames",
    ],
}  # fmt: skip
# Left out on purpose; docs/coming_from.md names each and says why.
LEFT_OUT = {
    "datasets": {"logger"},
    "interleave": {"logger"},
    "packing": {"logger"},
    "parquet_utils": {"logger", "get_hdfs_host", "get_hdfs_block_size", "get_hdfs_extra_conf", "hdfs_ls_cmd"},
}


def left_out_section() -> str:
    page = (REPO / "docs" / "coming_from.md").read_text(encoding="utf-8")
    return page.split("Left out, on purpose:", 1)[1].strip().split("\n\n", 1)[0]


@pytest.mark.parametrize("submodule", sorted(NEMO_NAMES))
def test_each_submodule_has_nemos_names_but_the_listed_ones(submodule):
    module = importlib.import_module(f"bagel_data.nemo.{submodule}")
    left_out = LEFT_OUT.get(submodule, set())
    missing = [name for name in NEMO_NAMES[submodule] if name not in left_out and not hasattr(module, name)]
    assert missing == []
    assert set(NEMO_NAMES[submodule]) - left_out <= set(module.__all__)  # `from ... import *` gets them too


@pytest.mark.parametrize("submodule", sorted(LEFT_OUT))
def test_the_left_out_names_are_absent_and_the_docs_say_so(submodule):
    module = importlib.import_module(f"bagel_data.nemo.{submodule}")
    section = left_out_section()
    for name in LEFT_OUT[submodule]:
        assert name in NEMO_NAMES[submodule]
        assert not hasattr(module, name), f"{submodule}.{name} is here now: drop it from LEFT_OUT and the docs"
        assert f"`{name}`" in section
        entry = next(item for item in section.split("\n- ") if f"`{name}`" in item)
        assert f"`{submodule}`" in entry, (name, entry)


def test_distributed_iterables_logger_is_a_child_of_the_package_logger():
    import logging

    from bagel_data.nemo import distributed_iterable

    assert isinstance(distributed_iterable.logger, logging.Logger)
    assert distributed_iterable.logger.name.startswith("bagel_data.")  # the package's level and handlers apply


def test_every_submodule_of_the_layout_is_listed():
    package = REPO / "src" / "bagel_data" / "nemo"
    ours = {path.stem for path in package.glob("*.py")} - {"__init__", "signatures"}  # signatures: ours alone
    assert ours == set(NEMO_NAMES)
