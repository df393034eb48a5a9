"""The config schema: every key of a run config, its kind, default and meaning, in one place.

`settings` defines every setting of a packed dataset once (`Settings`), `sections` holds the
tables (two of them views of `settings`; a family's own keys stand in its file), `kinds` the
value checks, `checks` the section checks the library calls at construction;
`tools/schema_doc.py` renders `docs/formats/run_config.md` from the tables and the families.
Imports nothing heavy (no torch, pyarrow or Pillow).
"""

from __future__ import annotations

from .checks import (
    RUN_PACKING_FIELDS,
    check_dataset_entry,
    check_dataset_info_group,
    check_frame_sampler_args,
    check_group_args,
    check_group_weights,
    check_run_config,
    check_settings,
    check_topology,
    check_transform_args,
)
from .kinds import AnyMapping, Bool, Field, Int, ListOf, Number, OneOf, Str, check_section
from .sections import (
    DATASET_FIELDS,
    DATASET_INFO_FIELDS,
    FRAME_SAMPLER_FIELDS,
    GROUP_FIELDS,
    PACKING_FIELDS,
    RUN_FIELDS,
    TOPOLOGY_FIELDS,
    TRANSFORM_FIELDS,
)
from .settings import SETTING_NAMES, Settings

__all__ = [
    "DATASET_FIELDS",
    "DATASET_INFO_FIELDS",
    "FRAME_SAMPLER_FIELDS",
    "GROUP_FIELDS",
    "PACKING_FIELDS",
    "RUN_FIELDS",
    "RUN_PACKING_FIELDS",
    "SETTING_NAMES",
    "TOPOLOGY_FIELDS",
    "TRANSFORM_FIELDS",
    "AnyMapping",
    "Bool",
    "Field",
    "Int",
    "ListOf",
    "Number",
    "OneOf",
    "Settings",
    "Str",
    "check_dataset_entry",
    "check_dataset_info_group",
    "check_frame_sampler_args",
    "check_group_args",
    "check_group_weights",
    "check_run_config",
    "check_section",
    "check_settings",
    "check_topology",
    "check_transform_args",
]
