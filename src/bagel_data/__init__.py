"""bagel-data: read, sample, pack and resume BAGEL training data.

Data flow: sources (parquet / JSONL / images / video) -> families (samples) -> packing
(token-budgeted sequences) -> batch (collate) -> loader (resumable DataLoader).
"""

from .batch import SimpleCustomBatch, bagel_packed_collate_fn, collate_wrapper
from .datasets import (
    DATASET_REGISTRY,
    DEFAULT_DATASET_INFO,
    BagelDatasetConfig,
    DataConfig,
    MaxLongEdgeMinShortEdgeResize,
    SftJSONLIterableDataset,
    T2IIterableDataset,
    UnifiedEditIterableDataset,
    init_arrow_pf_fs,
    make_bagel_multimodal_dataset,
)
from .errors import BadSampleError, BagelDataError, ConfigError, ResumeError, SkipReason, TooManyFailuresError
from .families.base import DistributedIterableDataset
from .families.interleaved import InterleavedIterableDataset
from .families.interleaved_base import InterleavedBaseIterableDataset, ParquetStandardIterableDataset
from .loader import build_dataloader
from .media.images import ImageTransform, pil_img2rgb
from .media.video import FrameSampler
from .packing.config import PackingConfig
from .packing.layout import (
    get_flattened_position_ids_extrapolate,
    get_flattened_position_ids_interpolate,
    len2weight,
    patchify,
    prepare_attention_mask_per_sample,
)
from .packing.packed_dataset import PackedDataset
from .sources.parquet import get_parquet_data_paths
from .tokenizer import QwenTokenizer, add_special_tokens, load_tokenizer

__all__ = [
    "DATASET_REGISTRY",
    "DEFAULT_DATASET_INFO",
    "BadSampleError",
    "BagelDataError",
    "BagelDatasetConfig",
    "ConfigError",
    "DataConfig",
    "DistributedIterableDataset",
    "FrameSampler",
    "ImageTransform",
    "InterleavedBaseIterableDataset",
    "InterleavedIterableDataset",
    "MaxLongEdgeMinShortEdgeResize",
    "PackedDataset",
    "PackingConfig",
    "ParquetStandardIterableDataset",
    "QwenTokenizer",
    "ResumeError",
    "SftJSONLIterableDataset",
    "SimpleCustomBatch",
    "SkipReason",
    "T2IIterableDataset",
    "TooManyFailuresError",
    "UnifiedEditIterableDataset",
    "add_special_tokens",
    "bagel_packed_collate_fn",
    "build_dataloader",
    "collate_wrapper",
    "get_flattened_position_ids_extrapolate",
    "get_flattened_position_ids_interpolate",
    "get_parquet_data_paths",
    "init_arrow_pf_fs",
    "len2weight",
    "load_tokenizer",
    "make_bagel_multimodal_dataset",
    "patchify",
    "pil_img2rgb",
    "prepare_attention_mask_per_sample",
]
