"""bagel-data: read, sample, pack and resume BAGEL training data.

Data flow: sources (parquet / JSONL / images / video) -> families (samples) -> packing
(token-budgeted sequences) -> batch (collate) -> loader (resumable DataLoader).
"""

# Exported names -> the module that defines them. Imported on first use (PEP 562), so
# that `import bagel_data` (and the CLI's --help) does not pay for torch, pyarrow and PIL.
_EXPORTS = {
    "BadSampleError": ".errors",
    "BagelDatasetConfig": ".nemo",
    "DataConfig": ".nemo",
    "InterleavedBaseIterableDataset": ".families.interleaved_base",
    "InterleavedIterableDataset": ".families.interleaved",
    "MaxLongEdgeMinShortEdgeResize": ".nemo",
    "ParquetStandardIterableDataset": ".families.parquet_standard",
    "bagel_packed_collate_fn": ".batch",
    "init_arrow_pf_fs": ".nemo",
    "merged_stats": ".loader",
    "BagelDataError": ".errors",
    "ConfigError": ".errors",
    "DATASET_REGISTRY": ".nemo",
    "DEFAULT_DATASET_INFO": ".nemo",
    "DistributedIterableDataset": ".families.base",
    "FrameSampler": ".media.video",
    "ImageTransform": ".media.images",
    "PackedDataset": ".nemo",
    "BagelDataloaderConfig": ".nemo.loader",
    "Settings": ".schema.settings",
    "PackingConfig": ".packing.config",
    "QwenTokenizer": ".tokenizer",
    "ResumeError": ".errors",
    "SftJSONLIterableDataset": ".nemo",
    "SimpleCustomBatch": ".batch",
    "SkipReason": ".errors",
    "T2IIterableDataset": ".nemo",
    "TooManyFailuresError": ".errors",
    "UnifiedEditIterableDataset": ".nemo",
    "add_special_tokens": ".tokenizer",
    "build_dataloader": ".loader",
    "collate_wrapper": ".batch",
    "get_flattened_position_ids_extrapolate": ".packing.layout",
    "get_flattened_position_ids_interpolate": ".packing.layout",
    "get_parquet_data_paths": ".sources.parquet",
    "len2weight": ".packing.layout",
    "load_tokenizer": ".tokenizer",
    "make_bagel_multimodal_dataset": ".nemo",
    "normalize_pixels": ".media.pixels",
    "patchify": ".packing.layout",
    "pil_img2rgb": ".media.images",
    "prepare_attention_mask_per_sample": ".packing.layout",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "DATASET_REGISTRY",
    "DEFAULT_DATASET_INFO",
    "BadSampleError",
    "BagelDataError",
    "BagelDataloaderConfig",
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
    "Settings",
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
    "merged_stats",
    "normalize_pixels",
    "patchify",
    "pil_img2rgb",
    "prepare_attention_mask_per_sample",
]
