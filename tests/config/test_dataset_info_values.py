"""dataset_info entries and config files: wrong shapes, wrong kinds of path, unreadable or
broken files are ConfigErrors naming the key (and the file and line), never raw errors."""

from __future__ import annotations

import pytest

from bagel_data.config import load_mapping, parse_groups
from bagel_data.errors import ConfigError


def expect(grouped, info, key: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_groups(grouped, info, None)
    assert caught.value.key == key, str(caught.value)
    assert caught.value.fix
    return str(caught.value)


def test_entry_that_is_a_string(grouped, info):
    info["t2i_pretrain"]["t2i"] = info["t2i_pretrain"]["t2i"]["data_dir"]
    assert "mapping" in expect(grouped, info, "dataset_info.t2i_pretrain.t2i")


def test_group_that_is_a_list(grouped, info):
    info["t2i_pretrain"] = ["t2i"]
    expect(grouped, info, "dataset_info.t2i_pretrain")


def test_data_dir_that_is_a_file(grouped, info):
    info["t2i_pretrain"]["t2i"]["data_dir"] = info["vlm_sft"]["vlm"]["jsonl_path"]
    assert "folder" in expect(grouped, info, "dataset_info.t2i_pretrain.t2i.data_dir")


def test_jsonl_path_that_is_a_folder(grouped, info):
    info["vlm_sft"]["vlm"]["jsonl_path"] = info["vlm_sft"]["vlm"]["data_dir"]
    assert "file" in expect(grouped, info, "dataset_info.vlm_sft.vlm.jsonl_path")


@pytest.mark.parametrize(
    ("key", "value"),
    [("data_dir", 5), ("data_dir", ["a"]), ("num_files", "ten"), ("num_total_samples", -1), ("jsonl_path", "a\0b")],
)
def test_entry_values_by_type(grouped, info, key, value):
    info["vlm_sft"]["vlm"][key] = value
    expect(grouped, info, f"dataset_info.vlm_sft.vlm.{key}")


def test_storage_options_must_be_a_mapping(grouped, info):
    info["t2i_pretrain"]["t2i"]["storage_options"] = ["region=us-east-1"]
    expect(grouped, info, "dataset_info.t2i_pretrain.t2i.storage_options")


def test_entry_typo_lists_the_allowed_keys(grouped, info):
    info["vlm_sft"]["vlm"]["jsonl_pth"] = info["vlm_sft"]["vlm"]["jsonl_path"]
    message = expect(grouped, info, "dataset_info.vlm_sft.vlm")
    assert "jsonl_pth" in message and "jsonl_path" in message


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"part-0.parquet": {"num_row_groups": 2}', "line 1"),
        ("[1, 2]", "JSON object"),
        ('{"part-0.parquet": 2}', "num_row_groups"),
        ('{"part-0.parquet": {"num_row_groups": "2"}}', "num_row_groups"),
        ("\xff\xfe", "UTF-8"),
    ],
)
def test_broken_parquet_info_names_the_file(grouped, info, tmp_path, text, says):
    path = tmp_path / "parquet_info.json"
    path.write_bytes(text.encode("latin-1"))
    info["unified_edit"]["edit"]["parquet_info_path"] = str(path)
    message = expect(grouped, info, "dataset_info.unified_edit.edit.parquet_info_path")
    assert str(path) in message and says in message


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("part-0.parquet: {num_row_groups: 2}\n", "line 1"),  # YAML: parquet_info is JSON, whatever its name
        ('{"part-0.parquet": {"num_row_groups": -1}}', "num_row_groups >= 0"),
        ('{"part-0.parquet": {"num_row_groups": true}}', "num_row_groups >= 0"),
    ],
)
def test_parquet_info_is_json_with_counts_of_at_least_zero(grouped, info, tmp_path, text, says):
    path = tmp_path / "parquet_info.yaml"
    path.write_text(text)
    info["unified_edit"]["edit"]["parquet_info_path"] = str(path)
    message = expect(grouped, info, "dataset_info.unified_edit.edit.parquet_info_path")
    assert str(path) in message and says in message


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("groups.yaml", "t2i_pretrain:\n  weight: [1,\n", "line 3"),
        ("groups.yaml", "a: b\n  c: d\n", "line 2"),
        ("groups.yaml", "[a, b]\n", "mapping at its top level"),
        ("groups.json", '{"a": 1,,}', "line 1, column 9"),
        ("groups.yaml", "a: \xff\n", "UTF-8"),
    ],
)
def test_broken_config_file_names_file_and_line(tmp_path, name, text, says):
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ConfigError) as caught:
        load_mapping(str(path), "grouped_datasets")
    assert caught.value.key == "grouped_datasets"
    assert str(path) in str(caught.value) and says in str(caught.value)


@pytest.mark.parametrize("source", [5, ["a.yaml"], b"a.yaml"])
def test_source_of_the_wrong_type(source):
    with pytest.raises(ConfigError, match="mapping or the path"):
        load_mapping(source, "dataset_info")


def test_source_that_is_a_folder(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_mapping(str(tmp_path), "dataset_info")
    assert str(tmp_path) in str(caught.value)


def test_missing_source_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_mapping(str(tmp_path / "nope.yaml"), "dataset_info")


def test_a_groups_left_out_keys_take_their_documented_defaults(grouped, info):
    """is_mandatory False, resume_data_status True (a data_status given resumes the group)."""
    name = next(iter(grouped))
    for key in ("is_mandatory", "resume_data_status"):
        grouped[name].pop(key, None)
    spec = {g.name: g for g in parse_groups(grouped, info, None)}[name]
    assert spec.is_mandatory is False and spec.resume_data_status is True
    grouped[name].update(is_mandatory=True, resume_data_status=False)
    spec = {g.name: g for g in parse_groups(grouped, info, None)}[name]
    assert spec.is_mandatory is True and spec.resume_data_status is False


@pytest.mark.parametrize("num_used_data", [[], None])
@pytest.mark.parametrize("dataset_names", [[], None])
def test_a_group_without_datasets_is_refused_by_name(grouped, info, num_used_data, dataset_names):
    name = next(iter(grouped))
    for key, value in (("dataset_names", dataset_names), ("num_used_data", num_used_data)):
        if value is None:
            grouped[name].pop(key, None)  # left out
        else:
            grouped[name][key] = value
    message = expect(grouped, info, f"{name}.dataset_names")
    assert ("must be a non-empty list" if dataset_names == [] else "required") in message
