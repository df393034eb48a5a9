"""Mirrors `nemo_automodel.components.datasets.multimodal.parquet_utils`."""

from __future__ import annotations

from ..sources import storage
from ..sources.parquet import get_parquet_data_paths


def init_arrow_pf_fs(parquet_file_path: str):
    """The pyarrow filesystem that holds `parquet_file_path`: local for a plain path; for
    `s3://`, `gs://` or `hdfs://` the one configured through `dataset_info` storage options."""
    return storage.resolve(str(parquet_file_path))[0]


__all__ = ["get_parquet_data_paths", "init_arrow_pf_fs"]
