"""The reference's doors, in NeMo AutoModel's module layout.

`bagel_data.nemo` mirrors `nemo_automodel.components.datasets.multimodal` (itself a port of
BAGEL's `data/`): the same submodules (`datasets`, `packing`, `collate_fns`, `loader`,
`interleave`, `transforms`, `utils`, `video`, `parquet_utils`, `distributed_iterable`) and
the same names, so code written against either runs here with its import changed, or with
the module aliased (docs/coming_from.md). Every door here is a thin face over the one build
path (`bagel_data.assembly`); the core never imports this package.
"""

from ..tokenizer import add_special_tokens
from .collate_fns import SimpleCustomBatch, bagel_packed_collate_fn, collate_wrapper
from .datasets import (
    DATASET_REGISTRY,
    SftJSONLIterableDataset,
    T2IIterableDataset,
    UnifiedEditIterableDataset,
    make_bagel_multimodal_dataset,
)
from .distributed_iterable import DistributedIterableDataset
from .interleave import InterleavedBaseIterableDataset, ParquetStandardIterableDataset
from .packing import DEFAULT_DATASET_INFO, BagelDatasetConfig, DataConfig, PackedDataset
from .parquet_utils import get_parquet_data_paths, init_arrow_pf_fs
from .transforms import ImageTransform, MaxLongEdgeMinShortEdgeResize, pil_img2rgb
from .utils import (
    get_flattened_position_ids_extrapolate,
    get_flattened_position_ids_interpolate,
    len2weight,
    patchify,
    prepare_attention_mask_per_sample,
)
from .video import FrameSampler

__all__ = [
    "DATASET_REGISTRY",
    "DEFAULT_DATASET_INFO",
    "BagelDatasetConfig",
    "DataConfig",
    "DistributedIterableDataset",
    "FrameSampler",
    "ImageTransform",
    "InterleavedBaseIterableDataset",
    "MaxLongEdgeMinShortEdgeResize",
    "PackedDataset",
    "ParquetStandardIterableDataset",
    "SftJSONLIterableDataset",
    "SimpleCustomBatch",
    "T2IIterableDataset",
    "UnifiedEditIterableDataset",
    "add_special_tokens",
    "bagel_packed_collate_fn",
    "collate_wrapper",
    "get_flattened_position_ids_extrapolate",
    "get_flattened_position_ids_interpolate",
    "get_parquet_data_paths",
    "init_arrow_pf_fs",
    "len2weight",
    "make_bagel_multimodal_dataset",
    "patchify",
    "pil_img2rgb",
    "prepare_attention_mask_per_sample",
]
