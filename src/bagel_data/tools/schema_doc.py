"""Render `docs/formats/run_config.md` from the schema tables and the families' own keys,
so the page cannot drift.

The keys every group and entry take are `schema/sections.py`'s; a family's own keys stand in
its file, and which groups take one (the "groups" column) is read from the families that
declare it (`families/registry.py`), never written by hand. Regenerate with
`python -m bagel_data.tools.schema_doc > docs/formats/run_config.md`; a test compares the
committed page with `render_run_config_doc()`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping

import yaml

from ..families.registry import DATASET_REGISTRY, families_reading
from ..schema.kinds import Field
from ..schema.sections import (
    DATASET_FIELDS,
    DATASET_INFO_FIELDS,
    FRAME_SAMPLER_FIELDS,
    GROUP_FIELDS,
    PACKING_FIELDS,
    RUN_FIELDS,
    TRANSFORM_FIELDS,
)

# A run config that is valid with every default it leaves out (a test checks it).
EXAMPLE_RUN_CONFIG = {
    "grouped_datasets": {
        "t2i_pretrain": {
            "dataset_names": ["t2i"],
            "num_used_data": [10],
            "weight": 1,
            "is_mandatory": True,
            "image_transform_args": {"image_stride": 16, "max_image_size": 512, "min_image_size": 256},
        },
        "vlm_sft": {
            "dataset_names": ["llava"],
            "num_used_data": [5000],
            "weight": 1,
            "image_transform_args": {"image_stride": 14, "max_image_size": 980, "min_image_size": 378},
            "frame_sampler_args": {"max_num_frames": 12, "min_num_frames": 8},
            "shuffle_lines": True,
        },
    },
    "dataset_info": "dataset_info.yaml",
    "packing": {
        "expected_num_tokens": 7680,
        "max_num_tokens": 8192,
        "max_num_tokens_per_sample": 4096,
        "prefer_buffer_before": 4096,
        "use_flex": True,
        "data_seed": 42,
    },
}

_INTRO = """\
# Run config

<!-- Generated from src/bagel_data/schema/sections.py and the families' own keys by
     `python -m bagel_data.tools.schema_doc > docs/formats/run_config.md`; do not edit by hand. -->

What `bagel-data run`, `validate` and `inspect` take: a YAML or JSON mapping with the keys
below. The same keys are checked, with the same rules, when you call
`make_bagel_multimodal_dataset(...)` from Python (the `packing` keys are its keyword
arguments). Every value is checked by type and range before any data is read; a mistake is a
`ConfigError` naming the key, the value and the fix. Unknown keys are errors too, listing the
allowed ones. YAML booleans are `true` / `false` unquoted: `"false"` is a string and an error.
"""

_SECTIONS = (
    ("Top level", "", RUN_FIELDS, False),
    ("`packing`", "The packer's token budgets and settings, and the dataset-level settings.", None, False),
    (
        "`grouped_datasets.<group>`",
        "What to mix (BAGEL's `data/configs/*.yaml` shape): group name -> these keys. The group "
        "name selects the family: <registered>; see "
        "[grouped_datasets](grouped_datasets.md).",
        "group",
        True,
    ),
    (
        "`image_transform_args`, `vit_image_transform_args`",
        "How images are resized and normalized.",
        TRANSFORM_FIELDS,
        False,
    ),
    ("`frame_sampler_args`", "How frames are drawn from a video (VLM).", FRAME_SAMPLER_FIELDS, False),
    (
        "`dataset_info.<group>.<dataset>`",
        "Where each dataset lives; relative paths are relative to the dataset_info file. See "
        "[dataset_info](dataset_info.md). Paths must exist; folders must be folders and files files.",
        "dataset_info",
        True,
    ),
)


def section_fields(section: str) -> dict[str, Field]:
    """Every key of a group ("group") or a `dataset_info` entry ("dataset_info"): the
    common ones as `schema/sections.py` has them, then each family's own, its scope the
    groups whose family declares it ("(required)" where that family requires it)."""
    fields = dict(GROUP_FIELDS if section == "group" else DATASET_INFO_FIELDS)
    for key, declared in families_reading(section).items():
        scope = ", ".join(group + (" (required)" if field.required else "") for group, field in declared)
        first = declared[0][1]
        # Required on the page only where every family that reads it requires it.
        required = all(field.required for _, field in declared)
        fields[key] = dataclasses.replace(first, required=required, scope=scope)
    return fields


def _registered_groups() -> str:
    """The group names `DATASET_REGISTRY` has, as the page lists them: read, not written, so
    a family added to the registry is listed by regenerating the page."""
    return ", ".join(f"`{group}`" for group in DATASET_REGISTRY)


def _default(field: Field) -> str:
    if field.required:
        return "required"
    if not field.has_default:
        return "—"
    value = field.default
    text = value if isinstance(value, str) else json.dumps(value)
    return f"`{text}`"


def _table(fields: Mapping[str, Field], with_scope: bool) -> list[str]:
    head = ["key", "type", "default", "meaning"] + (["groups"] if with_scope else [])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key, field in fields.items():
        cells = [f"`{key}`", field.kind.describe(), _default(field), field.meaning]
        cells += [field.scope] if with_scope else []
        lines.append("| " + " | ".join(cell.replace("|", "\\|") if i else cell for i, cell in enumerate(cells)) + " |")
    return lines


def _example_yaml() -> str:
    # Leaf lists and mappings inline, except `packing`, which reads better one key a line.
    parts = []
    for key, value in EXAMPLE_RUN_CONFIG.items():
        flow = None if key == "grouped_datasets" else False
        parts.append(yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=flow, width=100))
    return "".join(parts).rstrip()


def render_run_config_doc() -> str:
    """The reference page of every run-config key: type, default and meaning."""
    lines = [_INTRO]
    for title, text, fields, with_scope in _SECTIONS:
        lines += [f"## {title}", ""]
        if text:
            lines += [text.replace("<registered>", _registered_groups()), ""]
        if fields is None:
            lines += _table(PACKING_FIELDS, False) + [""]
            lines += ["Beyond the packer's own settings, `packing` also takes:", ""]
            lines += _table(DATASET_FIELDS, False)
        else:
            lines += _table(section_fields(fields) if isinstance(fields, str) else fields, with_scope)
        lines.append("")
    lines += [
        "## Example",
        "",
        "```yaml",
        _example_yaml(),
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render_run_config_doc())
