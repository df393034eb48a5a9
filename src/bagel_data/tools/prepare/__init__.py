"""Writing raw data in the three BAGEL formats: T2I and edit parquet shards, VLM SFT JSONL.

Each function streams its rows, keeps going past bad ones, and returns a `PrepareReport`
naming every dropped (or, for VLM, repaired) row with its location and reason, so that a
dataset is never silently smaller than its source.
"""

from .edit import prepare_edit, write_parquet_info
from .interleaved import prepare_interleaved
from .report import DropReason, Fix, PrepareReport, RowNote
from .t2i import prepare_t2i
from .vlm import prepare_vlm

__all__ = [
    "DropReason",
    "Fix",
    "PrepareReport",
    "RowNote",
    "prepare_edit",
    "prepare_interleaved",
    "prepare_t2i",
    "prepare_vlm",
    "write_parquet_info",
]
