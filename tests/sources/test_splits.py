"""Hub-style split layouts and `data_files` (sources/splits.py): a folder holding several
splits reads `train` unless `split:` names another, through every door that lists a data_dir.

Before this rule, `data/train-0000{0,1,2}-of-00003.parquet` beside
`data/test-00000-of-00001.parquet` with `num_used_data: [3]` took the test file (it sorts
first) and left the last train file out."""

from __future__ import annotations

import pickle

import pytest

from bagel_data import make_bagel_multimodal_dataset
from bagel_data.errors import ConfigError
from bagel_data.sources.parquet import get_parquet_data_paths
from bagel_data.sources.splits import DataDir, choose_split, data_dir_of, split_of
from helpers.builders import SMALL_VAE, png_bytes, write_t2i

HUB = ["train-00000-of-00003.parquet", "train-00001-of-00003.parquet", "train-00002-of-00003.parquet",
       "test-00000-of-00001.parquet"]  # fmt: skip
PACKING = dict(expected_num_tokens=400, max_num_tokens=800, max_num_tokens_per_sample=400, prefer_buffer_before=200)


def _hub(folder, names=HUB):
    """One T2I row per file, captioned with the file's split and index."""
    rows = [[[{"image": png_bytes(32, 32), "captions": {"caption": name.split("-", 1)[0] + f" {i}"}}]]
            for i, name in enumerate(names)]  # fmt: skip
    write_t2i(folder, rows, names)
    return folder


def _dataset(tokenizer, special_tokens, entry, num_used=3):
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer, special_tokens=special_tokens, num_workers=1,
        grouped_datasets={"t2i_pretrain": {"dataset_names": ["hub"], "image_transform_args": SMALL_VAE,
                                           "num_used_data": [num_used], "weight": 1}},
        dataset_info={"t2i_pretrain": {"hub": entry}}, **PACKING,
    )  # fmt: skip


def _names(family) -> list[str]:
    return [str(path).rsplit("/", 1)[-1] for path in family.data_paths]


def _captions(family, tokenizer) -> list[str]:
    log = family.new_skip_log()
    return sorted(tokenizer.decode(sample["text_ids_list"][0]) for _, sample in family.iter_pass(log))


def test_a_hub_folder_reads_its_train_split_by_default(tmp_path, tokenizer, special_tokens):
    _hub(tmp_path / "data")
    family = _dataset(tokenizer, special_tokens, {"data_dir": str(tmp_path / "data")}).grouped_datasets[0]
    assert _names(family) == HUB[:3]
    assert _captions(family, tokenizer) == ["train 0", "train 1", "train 2"]


def test_split_names_the_split_to_read(tmp_path, tokenizer, special_tokens):
    _hub(tmp_path / "data")
    entry = {"data_dir": str(tmp_path / "data"), "split": "test"}
    family = _dataset(tokenizer, special_tokens, entry, num_used=1).grouped_datasets[0]
    assert _names(family) == ["test-00000-of-00001.parquet"]
    assert _captions(family, tokenizer) == ["test 3"]


def test_a_split_the_folder_lacks_is_a_config_error_naming_those_it_has(tmp_path, tokenizer, special_tokens):
    _hub(tmp_path / "data")
    with pytest.raises(ConfigError, match=r"split = 'validation'.*\['test', 'train'\]"):
        _dataset(tokenizer, special_tokens, {"data_dir": str(tmp_path / "data"), "split": "validation"})
    _hub(tmp_path / "only_test", ["test-00000-of-00001.parquet"])  # never trained on by default
    with pytest.raises(ConfigError, match=r"split = 'train'.*\['test'\]"):
        _dataset(tokenizer, special_tokens, {"data_dir": str(tmp_path / "only_test")}, num_used=1)


def test_split_files_beside_files_that_name_none_are_a_config_error_naming_both(tmp_path, tokenizer, special_tokens):
    _hub(tmp_path / "mixed", ["part-0.parquet", "test-00000-of-00001.parquet", "train-00000-of-00001.parquet"])
    with pytest.raises(ConfigError) as caught:
        _dataset(tokenizer, special_tokens, {"data_dir": str(tmp_path / "mixed")}, num_used=1)
    assert "['test', 'train']" in str(caught.value) and "part-0.parquet" in str(caught.value)


def test_split_folders_and_a_repository_root(tmp_path, tokenizer, special_tokens):
    _hub(tmp_path / "folders" / "train", ["a.parquet", "b.parquet"])
    _hub(tmp_path / "folders" / "test", ["c.parquet"])
    family = _dataset(tokenizer, special_tokens, {"data_dir": str(tmp_path / "folders")}, 2).grouped_datasets[0]
    assert [str(path).rsplit("/", 2)[-2] for path in family.data_paths] == ["train", "train"]
    _hub(tmp_path / "repo" / "data")  # a Hub repository: README beside data/
    (tmp_path / "repo" / "README.md").write_text("# card\n")
    family = _dataset(tokenizer, special_tokens, {"data_dir": str(tmp_path / "repo")}).grouped_datasets[0]
    assert _names(family) == HUB[:3]


def test_data_files_patterns_pick_the_files(tmp_path, tokenizer, special_tokens):
    _hub(tmp_path / "repo" / "data")
    entry = {"data_dir": str(tmp_path / "repo"), "data_files": "data/train-*.parquet"}
    assert _names(_dataset(tokenizer, special_tokens, entry).grouped_datasets[0]) == HUB[:3]
    entry = {"data_dir": str(tmp_path / "repo"), "split": "test",
             "data_files": {"train": ["**/train-*"], "test": "data/test-0000?-of-*.parquet"}}  # fmt: skip
    assert _names(_dataset(tokenizer, special_tokens, entry, 1).grouped_datasets[0]) == [HUB[3]]
    with pytest.raises(ConfigError, match=r"data_files = 'data/valid-\*': matches no"):
        _dataset(tokenizer, special_tokens, {"data_dir": str(tmp_path / "repo"), "data_files": "data/valid-*"})
    with pytest.raises(ConfigError, match=r"hub.data_files.test = 3"):
        _dataset(tokenizer, special_tokens, {"data_dir": str(tmp_path / "repo"), "data_files": {"test": 3}})


def test_a_folder_that_names_no_split_is_read_whole_as_before(tmp_path):
    names = ["00000.parquet", "00001.parquet", "shard-00000-of-00002.parquet", "shard-00001-of-00002.parquet"]
    assert choose_split(names, None, "f") == names
    with pytest.raises(ConfigError, match="no file of f names a split"):
        choose_split(["00000.parquet"], "test", "f")


@pytest.mark.parametrize(
    ("path", "split"),
    [("train-00000-of-00003.parquet", "train"), ("my_split-00000-of-00001.parquet", "my_split"),
     ("train.parquet", "train"), ("test_0.parquet", "test"), ("dev-1.parquet", "validation"),
     ("validation-00000-of-00001.parquet", "validation"), ("data/valid.tar", "validation"),
     ("training/x.parquet", "train"), ("testimony.parquet", None), ("contest-0.parquet", None),
     ("00000.parquet", None), ("trainer.parquet", None)],
)  # fmt: skip
def test_the_split_a_file_name_says(path, split):
    assert split_of(path) == split


def test_the_listing_every_parquet_family_shares_reads_the_split(tmp_path):
    for name in HUB:
        (tmp_path / name).write_bytes(b"")
    assert [p.rsplit("/", 1)[-1] for p in get_parquet_data_paths([str(tmp_path)], [3])] == HUB[:3]
    chosen = get_parquet_data_paths([data_dir_of("x", str(tmp_path), {"split": "test"})], [2])
    assert [p.rsplit("/", 1)[-1] for p in chosen] == [HUB[3]] * 2


def test_a_data_dir_keeps_its_selection_through_pickling():
    data_dir = DataDir("/data", "test", {"test": "x-*"})
    copy = pickle.loads(pickle.dumps(data_dir))
    assert (copy, copy.split_name, copy.data_files) == ("/data", "test", {"test": "x-*"})
    assert copy.split("/") == ["", "data"]  # still a path: str's own methods work
    assert data_dir_of("x", "/data", {}) == "/data" and type(data_dir_of("x", "/data", {})) is str


@pytest.mark.parametrize("split", [None, "test"])
def test_prepare_reads_one_split_of_a_hub_repository(tmp_path, split):
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from bagel_data.cli.tools import prepare_app

    _hub(tmp_path / "repo" / "data")
    args = ["t2i", str(tmp_path / "repo"), str(tmp_path / "out")] + (["--split", split] if split else [])
    result = CliRunner().invoke(prepare_app, args)
    assert result.exit_code == 0, result.output
    rows = [row for path in sorted((tmp_path / "out").glob("*.parquet")) for row in pq.read_table(path).to_pylist()]
    expected = ["test 3"] if split else ["train 0", "train 1", "train 2"]
    assert sorted(row["captions"].split('"')[3] for row in rows) == expected


def test_split_on_a_dataset_read_from_its_jsonl_is_a_config_error():
    entry = {"data_dir": "/media", "jsonl_path": "/sft.jsonl", "split": "test"}
    with pytest.raises(ConfigError, match=r"dataset_info.vlm_sft.chat.split = 'test'.*jsonl_path"):
        data_dir_of("dataset_info.vlm_sft.chat", "/media", entry)


@pytest.mark.parametrize(
    ("path", "split"),
    [("Train-0.parquet", "train"), ("test0.parquet", "test"), ("VALID.parquet", "validation"),
     ("TRAINING/x.parquet", "train"), ("Eval/x.parquet", "test")],
)  # fmt: skip
def test_split_words_in_any_case_and_before_a_digit(path, split):
    assert split_of(path) == split


def test_glob_patterns_match_as_datasets_does():
    import re

    from bagel_data.sources.splits import _translate

    def matches(pattern: str, path: str) -> bool:
        return re.fullmatch(_translate(pattern), path) is not None

    assert matches("[!a]*.parquet", "b.parquet") and not matches("[!a]*.parquet", "a.parquet")
    assert matches("**/x.parquet", "x.parquet") and matches("**/x.parquet", "d/e/x.parquet")
    assert not matches("*.parquet", "d/x.parquet") and matches("d/?.parquet", "d/x.parquet")


def test_a_pattern_through_a_folder_and_a_hub_roots_split(tmp_path):
    from bagel_data.sources.splits import list_data_files

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.parquet").write_bytes(b"")
    (tmp_path / "top.parquet").write_bytes(b"")
    found = list_data_files(DataDir(str(tmp_path), None, "*/train.parquet"), (".parquet",))
    assert [path for path, _ in found] == [str(tmp_path / "sub" / "train.parquet")]
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    for name in ("train-00000-of-00001.parquet", "test-00000-of-00001.parquet"):
        (repo / "data" / name).write_bytes(b"")
    chosen = list_data_files(DataDir(str(repo), "test"), (".parquet",))
    assert [path.rsplit("/", 1)[-1] for path, _ in chosen] == ["test-00000-of-00001.parquet"]
