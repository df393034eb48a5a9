"""Configuration mistakes are reported at construction, naming the key, the value and the fix."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from bagel_data import ConfigError, make_bagel_multimodal_dataset
from bagel_data.errors import ConfigWarning
from helpers.golden import absolute_dataset_info, load_case

# Positions, orders and unit counts here are the walk by whole units' (tars', a user family's,
# compat's); the default walk by rows is tests/test_row_walk.py's.
pytestmark = pytest.mark.walk_by_units


@pytest.fixture(scope="module")
def base(golden_root):
    case, _, _ = load_case("packed_three_groups_flex")
    return case


def build(case, tokenizer, special_tokens, grouped=None, info=None, **packing):
    params = dict(case["packing"])
    params.update(packing)
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets=grouped if grouped is not None else case["grouped_datasets"],
        dataset_info=info if info is not None else absolute_dataset_info(case),
        num_workers=1,
        **params,
    )


BUILD_CALL_LINE = build.__code__.co_firstlineno + 3  # its `return make_bagel_multimodal_dataset(`


def groups_with(case, group, **changes):
    grouped = copy.deepcopy(case["grouped_datasets"])
    grouped[group].update(changes)
    return grouped


def expect_error(match, case, tokenizer, special_tokens, **kwargs):
    with pytest.raises(ConfigError, match=match) as info:
        build(case, tokenizer, special_tokens, **kwargs)
    return str(info.value)


def test_missing_dataset_info(base, tokenizer, special_tokens):
    with pytest.raises(ConfigError, match="dataset_info is required"):
        make_bagel_multimodal_dataset(tokenizer, special_tokens, base["grouped_datasets"])


def test_unknown_group(base, tokenizer, special_tokens):
    grouped = {"t2i_pretrian": base["grouped_datasets"]["t2i_pretrain"]}
    message = expect_error("unknown group", base, tokenizer, special_tokens, grouped=grouped)
    assert "t2i_pretrian" in message and "t2i_pretrain" in message


def test_unknown_dataset_name(base, tokenizer, special_tokens):
    grouped = groups_with(base, "t2i_pretrain", dataset_names=["laion"])
    assert "laion" in expect_error("not in dataset_info", base, tokenizer, special_tokens, grouped=grouped)


def test_unknown_key_in_group_is_an_error(base, tokenizer, special_tokens):
    grouped = groups_with(base, "vlm_sft", shufle_lines=True)
    message = expect_error("unknown key", base, tokenizer, special_tokens, grouped=grouped)
    assert "(did you mean 'shuffle_lines' for 'shufle_lines'?)" in message


def test_did_you_mean_names_only_close_keys():
    from bagel_data.schema.kinds import did_you_mean

    allowed = ["max_num_tokens", "mix_by", "use_flex"]
    assert did_you_mean(["max_num_token", "zzz"], allowed) == " (did you mean 'max_num_tokens' for 'max_num_token'?)"
    assert (
        did_you_mean(["mixby", "useflex"], allowed) == " (did you mean 'mix_by' for 'mixby', 'use_flex' for 'useflex'?)"
    )
    assert did_you_mean(["zzz"], allowed) == ""


def test_num_used_data_length(base, tokenizer, special_tokens):
    grouped = groups_with(base, "t2i_pretrain", num_used_data=[3, 4])
    expect_error("one positive int per dataset name", base, tokenizer, special_tokens, grouped=grouped)


def test_missing_file_in_dataset_info(base, tokenizer, special_tokens):
    info = absolute_dataset_info(base)
    info["vlm_sft"]["vlm"]["jsonl_path"] = "/nonexistent/train.jsonl"
    message = expect_error("does not exist", base, tokenizer, special_tokens, info=info)
    assert "dataset_info.vlm_sft.vlm.jsonl_path" in message


def test_missing_parquet_info_path(base, tokenizer, special_tokens):
    info = absolute_dataset_info(base)
    del info["unified_edit"]["edit"]["parquet_info_path"]
    expect_error("parquet_info_path", base, tokenizer, special_tokens, info=info)


def test_weights_sum_to_zero(base, tokenizer, special_tokens):
    grouped = groups_with(base, "t2i_pretrain", weight=0)
    expect_error("sum to more than 0", base, tokenizer, special_tokens, grouped=grouped)


def test_too_few_units_says_how_many_are_needed(base, tokenizer, special_tokens):
    with pytest.raises(ConfigError, match="at least 4 are needed"):
        make_bagel_multimodal_dataset(
            tokenizer,
            special_tokens,
            base["grouped_datasets"],
            world_size=2,
            num_workers=2,
            dataset_info=absolute_dataset_info(base),
        )


def test_transform_larger_than_position_table(base, tokenizer, special_tokens):
    grouped = groups_with(
        base, "t2i_pretrain", image_transform_args={"image_stride": 16, "max_image_size": 1024, "min_image_size": 512}
    )
    message = expect_error("max_latent_size", base, tokenizer, special_tokens, grouped=grouped)
    assert "interpolate_pos" in message
    # Interpolated positions map any size onto the table.
    build(base, tokenizer, special_tokens, grouped=grouped, interpolate_pos=True)


def test_vit_side_over_max_num_patch_per_side(base, tokenizer, special_tokens):
    expect_error("max_num_patch_per_side", base, tokenizer, special_tokens, max_num_patch_per_side=5)


def test_budgets(base, tokenizer, special_tokens):
    expect_error("max_num_tokens_per_sample", base, tokenizer, special_tokens, max_num_tokens_per_sample=5000)
    expect_error("text_cond_dropout_prob", base, tokenizer, special_tokens, text_cond_dropout_prob=1.5)


def test_budget_risks_are_warnings(base, tokenizer, special_tokens):
    with pytest.warns(ConfigWarning, match="mandatory groups") as caught:
        build(base, tokenizer, special_tokens)
    # Shown at the line that called the public builder (here in `build`), where the user can change it.
    assert {(warning.filename, warning.lineno) for warning in caught} == {(__file__, BUILD_CALL_LINE)}


def _risks(mandatory: int, **packing) -> list[str]:
    from types import SimpleNamespace

    from bagel_data.assembly import budget_risks
    from bagel_data.packing.config import PackingConfig

    groups = [SimpleNamespace(name=f"g{i}", is_mandatory=True) for i in range(mandatory)]
    return budget_risks(groups, PackingConfig(**packing))


def test_budget_risks_start_just_past_the_budget():
    fits = dict(expected_num_tokens=900, max_num_tokens=1000, max_num_tokens_per_sample=500, prefer_buffer_before=500)
    assert _risks(2, **fits) == []  # two mandatory samples of 500 fill 1000 exactly; 500 + 500 too
    over = _risks(2, **{**fits, "max_num_tokens": 999, "expected_num_tokens": 899})
    assert [risk.split()[0] for risk in over] == ["mandatory", "prefer_buffer_before"]
    assert _risks(1, **{**fits, "prefer_buffer_before": 501})[0].startswith("prefer_buffer_before + ")


def test_transform_args_checked(base, tokenizer, special_tokens):
    grouped = groups_with(base, "t2i_pretrain", image_transform_args={"image_stride": 16, "max_size": 128})
    expect_error("unknown key", base, tokenizer, special_tokens, grouped=grouped)


def test_configs_from_yaml_and_json_files_with_relative_paths(base, tokenizer, special_tokens, tmp_path):
    info = absolute_dataset_info(base)
    (tmp_path / "info.json").write_text(json.dumps(info))
    (tmp_path / "groups.yaml").write_text(yaml.safe_dump(base["grouped_datasets"]))
    dataset = build(
        base, tokenizer, special_tokens, grouped=str(tmp_path / "groups.yaml"), info=str(tmp_path / "info.json")
    )
    assert dataset.group_names == list(base["grouped_datasets"])
    # Relative paths in a dataset_info file are relative to that file.
    relative = copy.deepcopy(base["dataset_info"])
    (tmp_path / "data").symlink_to(absolute_dataset_info(base)["t2i_pretrain"]["t2i"]["data_dir"].rsplit("/t2i", 1)[0])
    for datasets in relative.values():
        for meta in datasets.values():
            for key in ("data_dir", "jsonl_path", "parquet_info_path"):
                if key in meta:
                    meta[key] = "data/" + meta[key]
    (tmp_path / "relative.yaml").write_text(yaml.safe_dump(relative))
    build(base, tokenizer, special_tokens, info=str(tmp_path / "relative.yaml"))


def test_config_error_survives_a_worker_round_trip():
    """DataLoader re-raises worker errors by calling the type with one message."""
    error = ConfigError("key", 3, "fix it")
    again = type(error)(str(error))
    assert str(again) == str(error) == "key = 3: fix it"
