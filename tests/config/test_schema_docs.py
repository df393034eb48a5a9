"""The schema is the one description of the config: it matches the code's defaults and the
keys the families accept, and docs/formats/run_config.md is generated from it."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

from bagel_data import make_bagel_multimodal_dataset
from bagel_data.config import ALLOWED_GROUP_KEYS, DATASET_REGISTRY
from bagel_data.media.images import DEFAULT_MAX_PIXELS, RESAMPLE_FILTERS, ImageTransform
from bagel_data.media.resize import RESIZE_BACKENDS
from bagel_data.media.video import FrameSampler
from bagel_data.packing.config import PackingConfig
from bagel_data.schema import (
    DATASET_FIELDS,
    FRAME_SAMPLER_FIELDS,
    PACKING_FIELDS,
    RUN_FIELDS,
    TRANSFORM_FIELDS,
    check_group_args,
    check_run_config,
)
from bagel_data.schema import sections as schema_sections
from bagel_data.sources.parquet import FILE_ORDERS
from bagel_data.tools.run import PACKING_KEYS
from bagel_data.tools.schema_doc import EXAMPLE_RUN_CONFIG, render_run_config_doc, section_fields

DOC = Path(__file__).resolve().parents[2] / "docs" / "formats" / "run_config.md"
REGENERATE = "python -m bagel_data.tools.schema_doc > docs/formats/run_config.md"


def test_committed_page_is_the_generated_one():
    assert DOC.read_text(encoding="utf-8") == render_run_config_doc(), f"the page drifted; run `{REGENERATE}`"


def test_page_lists_every_key_with_type_and_default():
    page = render_run_config_doc()
    every_group_key = section_fields("group")
    for fields in (PACKING_FIELDS, DATASET_FIELDS, every_group_key, TRANSFORM_FIELDS, FRAME_SAMPLER_FIELDS):
        for key, field in fields.items():
            row = next(line for line in page.splitlines() if line.startswith(f"| `{key}` |"))
            assert field.kind.describe().replace("|", "\\|") in row
            assert field.meaning in row


def test_packing_defaults_are_the_code_defaults():
    """The two schema tables are views of `Settings`: every field but `compat` (a run
    config's top-level key, RUN_FIELDS) once, with its default."""
    tables = {**PACKING_FIELDS, **DATASET_FIELDS}
    assert len(tables) == len(PACKING_FIELDS) + len(DATASET_FIELDS)
    assert set(tables) | {"compat"} == {field.name for field in dataclasses.fields(PackingConfig)}
    for field in dataclasses.fields(PackingConfig):
        schema = tables.get(field.name, RUN_FIELDS.get(field.name))
        assert schema is not None and schema.default == field.default, field.name
    signature = inspect.signature(make_bagel_multimodal_dataset).parameters
    for key, field in tables.items():
        assert signature[key].default == field.default, key
    assert set(PACKING_KEYS) == set(tables)


def test_transform_and_sampler_defaults_are_the_code_defaults():
    for cls, fields in ((ImageTransform, TRANSFORM_FIELDS), (FrameSampler, FRAME_SAMPLER_FIELDS)):
        parameters = inspect.signature(cls).parameters
        assert set(parameters) == set(fields), cls.__name__
        for key, field in fields.items():
            if field.required:
                assert parameters[key].default is inspect.Parameter.empty, key
            else:
                default = parameters[key].default
                assert list(default) == field.default if isinstance(default, tuple) else default == field.default
    assert schema_sections.DEFAULT_MAX_PIXELS == DEFAULT_MAX_PIXELS
    assert schema_sections.FILE_ORDERS == FILE_ORDERS
    assert tuple(RESAMPLE_FILTERS) == schema_sections.RESAMPLE_FILTERS
    assert RESIZE_BACKENDS == schema_sections.RESIZE_BACKENDS


def test_every_key_a_family_accepts_is_described():
    for family in DATASET_REGISTRY.values():
        assert ALLOWED_GROUP_KEYS[family] <= set(section_fields("group")), family.__name__


def test_example_is_valid_with_the_defaults_it_leaves_out():
    check_run_config(EXAMPLE_RUN_CONFIG)
    packing = PackingConfig(**{k: v for k, v in EXAMPLE_RUN_CONFIG["packing"].items() if k in PACKING_FIELDS})
    packing.check()
    for name, args in EXAMPLE_RUN_CONFIG["grouped_datasets"].items():
        check_group_args(name, args, ALLOWED_GROUP_KEYS[DATASET_REGISTRY[name]])
        stride = packing.vae_image_downsample if name != "vlm_sft" else packing.vit_patch_size
        table = packing.max_latent_size if name != "vlm_sft" else packing.max_num_patch_per_side
        assert args["image_transform_args"]["max_image_size"] // stride <= table
