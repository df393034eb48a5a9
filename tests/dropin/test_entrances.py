"""Every entrance is a face over one build path and one settings definition.

- Each door's signature or fields carry every setting of `Settings`, with its default.
- Under BAGEL's trainer setup (plain DataLoader, 2 workers, `torch.manual_seed(11)`, CFG
  dropout on), `compat="bagel"` through every public constructor reproduces the reference
  run recorded in `tests/conformance/workers/` field for field, timesteps included.
- `DataConfig` takes BAGEL's positional form and NeMo's keyword form.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json

import pytest
import torch

from bagel_data import BagelDatasetConfig, DataConfig, PackedDataset, collate_wrapper, make_bagel_multimodal_dataset
from bagel_data.errors import ConfigError
from bagel_data.schema.settings import DEFAULTS, SETTING_NAMES, Settings, names_of
from bagel_data.tools.run import PACKING_KEYS
from helpers.doors import DOORS, build_through
from helpers.golden import CONFORMANCE, absolute_dataset_info, batch_field_summary, load_case

WORKERS_CASE = CONFORMANCE / "workers" / "t2i_edit_interpolate_seed11.json"
DROPOUTS = {"text_cond_dropout_prob": 0.1, "vit_cond_dropout_prob": 0.4, "vae_cond_dropout_prob": 0.1}


# -- one settings definition ------------------------------------------------------------------
def _defaults(callable_) -> dict:
    return {p.name: p.default for p in inspect.signature(callable_).parameters.values()}


@pytest.mark.parametrize("door", [make_bagel_multimodal_dataset, PackedDataset, DataConfig])
def test_every_setting_reaches_every_constructor_with_its_default(door):
    parameters = _defaults(door)
    missing = [name for name in SETTING_NAMES if name not in parameters]
    assert missing == []
    wrong = {name: parameters[name] for name in SETTING_NAMES if parameters[name] != DEFAULTS[name]}
    assert wrong == {}


def test_bagel_dataset_config_fields_are_the_settings_and_the_two_sources():
    fields = {field.name: field.default for field in dataclasses.fields(BagelDatasetConfig)}
    sources = {"grouped_datasets", "grouped_datasets_path", "dataset_info", "dataset_info_path"}
    assert set(fields) == set(SETTING_NAMES) | sources
    assert {name: fields[name] for name in SETTING_NAMES} == dict(DEFAULTS)
    assert BagelDatasetConfig is DataConfig  # NeMo: DataConfig = BagelDatasetConfig


def test_run_config_packing_section_is_every_setting_but_the_top_level_compat():
    assert set(PACKING_KEYS) == set(SETTING_NAMES) - {"compat"}


def test_the_reference_positional_order_comes_from_the_roles():
    made = [p.name for p in inspect.signature(make_bagel_multimodal_dataset).parameters.values()]
    budgets, sizes = list(names_of("budget")), list(names_of("data_config"))
    assert made[6 : 6 + len(budgets)] == budgets
    after_status = made.index("data_status")
    assert made[after_status + 1 : after_status + 2 + len(sizes)] == ["data_seed", *sizes]
    keyword_only = [p.name for p in inspect.signature(PackedDataset).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert set(keyword_only) == set(SETTING_NAMES) - set(budgets)


def test_a_setting_is_checked_at_every_door_by_the_same_rule(tokenizer, special_tokens):
    with pytest.raises(ConfigError, match="mix_by"):
        Settings(mix_by="bytes")
    with pytest.raises(ConfigError, match="mix_by"):
        BagelDatasetConfig(grouped_datasets={}, mix_by="bytes")
    with pytest.raises(ConfigError, match="mix_by"):
        DataConfig({}, mix_by="bytes")
    with pytest.raises(ConfigError, match="mix_by"):
        make_bagel_multimodal_dataset(tokenizer, special_tokens, {}, mix_by="bytes")
    with pytest.raises(ConfigError, match="max_consecutive_failures"):
        PackedDataset(DataConfig({}), tokenizer, special_tokens, 0, 1, 1, max_consecutive_failures=-1)


# -- DataConfig: BAGEL's positional form and NeMo's keyword form ------------------------------
def test_data_config_takes_bagels_positional_form():
    config = DataConfig({"g": {}}, 0.2, 0.3, 0.4, 8, 64, 7, 35)
    assert (config.text_cond_dropout_prob, config.vit_cond_dropout_prob, config.vae_cond_dropout_prob) == (
        0.2,
        0.3,
        0.4,
    )
    assert (config.vae_image_downsample, config.max_latent_size, config.vit_patch_size) == (8, 64, 7)
    assert config.max_num_patch_per_side == 35 and config.grouped_datasets == {"g": {}}


def test_data_config_takes_nemos_keyword_form():
    config = DataConfig(
        grouped_datasets_path="groups.yaml",
        dataset_info={"g": {"d": {"data_dir": "/data"}}},
        data_seed=9,
        expected_num_tokens=128,
        max_num_tokens=256,
        pack_strategy="best_fit",
    )
    assert config.grouped_datasets is None and config.grouped_datasets_path == "groups.yaml"
    assert (config.data_seed, config.expected_num_tokens, config.max_num_tokens) == (9, 128, 256)
    assert config.pack_strategy == "best_fit" and config.mix_by == DEFAULTS["mix_by"]
    with pytest.raises(TypeError):
        DataConfig(dataset_infos={})  # a misspelt keyword is Python's TypeError, naming it


@pytest.mark.filterwarnings("ignore::bagel_data.errors.ConfigWarning")
def test_an_explicit_argument_wins_over_the_data_config(tokenizer, special_tokens):
    case, _, _ = load_case("packed_three_groups_flex")
    config = DataConfig(case["grouped_datasets"], mix_by="tokens", max_buffer_size=7)
    budgets = {k: case["packing"][k] for k in ("expected_num_tokens", "max_num_tokens_per_sample", "max_num_tokens")}
    info = absolute_dataset_info(case)
    from_config = PackedDataset(config, tokenizer, special_tokens, 0, 1, 1, **budgets, dataset_info=info)
    assert (from_config.config.mix_by, from_config.config.max_buffer_size) == ("tokens", 7)
    explicit = PackedDataset(
        config, tokenizer, special_tokens, 0, 1, 1, **budgets, max_buffer_size=3, dataset_info=info, mix_by="samples"
    )
    assert (explicit.config.mix_by, explicit.config.max_buffer_size) == ("samples", 3)


# -- the reference under 2 DataLoader workers, through every door -----------------------------
@pytest.fixture(scope="module")
def workers_case():
    case, _, _ = load_case("packed_t2i_edit_interpolate")
    return case, json.loads(WORKERS_CASE.read_text())


@pytest.mark.filterwarnings("ignore::bagel_data.errors.ConfigWarning")
@pytest.mark.parametrize("door", [door for door in DOORS if door != "run_config"])
def test_trainer_setup_with_two_workers_and_dropout_matches_the_reference(
    door, workers_case, tokenizer, special_tokens
):
    case, expected = workers_case
    settings = dict(case["packing"], **DROPOUTS, data_seed=case["data_seed"], compat="bagel")
    dataset = build_through(
        door,
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped=case["grouped_datasets"],
        info=absolute_dataset_info(case),
        settings=settings,
        num_workers=2,
    )
    rng_before = torch.get_rng_state()
    torch.manual_seed(11)  # as the reference run was: the workers' seeds come from it
    try:
        loader = torch.utils.data.DataLoader(dataset, batch_size=1, num_workers=2, collate_fn=collate_wrapper())
        batches = [batch.to_dict() for batch in itertools.islice(iter(loader), len(expected))]
    finally:
        torch.set_rng_state(rng_before)
    assert len(batches) == len(expected)
    for index, (batch, want) in enumerate(zip(batches, expected)):
        assert set(batch) == set(want), f"batch {index}: keys"
        for field, value in want.items():
            assert batch_field_summary(batch[field]) == value, f"{door}: batch {index} {field}"


@pytest.mark.filterwarnings("ignore::bagel_data.errors.ConfigWarning")
def test_every_door_gives_the_same_packs_in_the_default_mode_with_dropout(tokenizer, special_tokens):
    """The default mode (no conformance case has dropout on): the same settings through
    every door give the same packs, random draws included."""
    case, _, _ = load_case("packed_three_groups_flex")
    grouped = {name: dict(args, weight=1) for name, args in case["grouped_datasets"].items()}
    settings = dict(case["packing"], **DROPOUTS, data_seed=5, mix_by="tokens", max_buffer_size=4)
    firsts = {}
    for door in DOORS:
        dataset = build_through(
            door,
            tokenizer=tokenizer,
            special_tokens=special_tokens,
            grouped=grouped,
            info=absolute_dataset_info(case),
            settings=settings,
        )
        assert dataset.config == Settings(**settings)
        firsts[door] = [{k: batch_field_summary(v) for k, v in b.items()} for b in itertools.islice(iter(dataset), 3)]
    reference = firsts[DOORS[0]]
    for door, batches in firsts.items():
        assert batches == reference, door


def test_a_budget_equal_to_max_num_tokens_is_allowed_and_one_above_is_not():
    Settings(max_num_tokens=4096, max_num_tokens_per_sample=4096, expected_num_tokens=4096).check()
    with pytest.raises(ConfigError, match="max_num_tokens_per_sample"):
        Settings(max_num_tokens=4096, max_num_tokens_per_sample=4097).check()


@pytest.mark.filterwarnings("ignore::bagel_data.errors.ConfigWarning")
def test_a_dataset_info_file_keeps_its_relative_paths_through_build(tmp_path, monkeypatch, tokenizer, special_tokens):
    """NeMo's recipe names files: relative paths inside `dataset_info_path` are taken
    relative to that file, at the door as everywhere else (not to the working directory)."""
    import os
    import shutil

    case, _, _ = load_case("packed_three_groups_flex")
    info = absolute_dataset_info(case)
    data = CONFORMANCE / "data"
    shutil.copytree(data, tmp_path / "recipe" / "data")
    for datasets in info.values():
        for entry in datasets.values():
            for key in ("data_dir", "jsonl_path", "parquet_info_path"):
                if key in entry:
                    entry[key] = os.path.relpath(entry[key], data.parent)  # "data/..."
    (tmp_path / "recipe" / "info.json").write_text(json.dumps(info))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    config = BagelDatasetConfig(
        grouped_datasets=case["grouped_datasets"], dataset_info_path=str(tmp_path / "recipe" / "info.json"),
        **case["packing"],
    )  # fmt: skip
    dataset = config.build(tokenizer=tokenizer, special_tokens=special_tokens, rank=0, world_size=1, num_workers=1,
                           global_seed=None)  # fmt: skip
    assert dataset.group_names == list(case["grouped_datasets"])
    assert next(iter(dataset))["sequence_length"] > 0
