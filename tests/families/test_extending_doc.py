"""docs/extending.md works as written: its family file, run.yaml and train.py, run as they are."""

from __future__ import annotations

import itertools
import json
import re
import runpy
from pathlib import Path

import pytest
import torch
import yaml

from bagel_data import ConfigError, make_bagel_multimodal_dataset
from bagel_data.tools.run import load_run_config
from bagel_data.tools.validate import validate_config
from helpers.batches import assert_same_batch
from helpers.builders import png_bytes, write_parquet

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def _block(name: str) -> str:
    match = re.search(rf"<!-- {re.escape(name)} -->\n```\w+\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert match, f"docs/extending.md has no block for {name}"
    return match.group(1)


def _write_data(folder: Path) -> None:
    folder.mkdir()
    for part in range(2):
        groups = [
            [
                {
                    "image": png_bytes(64, 48, (part * 90, g * 60, i * 40)),
                    "question": f"What colour is picture {part}-{g}-{i}?",
                    "answers": [] if (part, g, i) == (1, 0, 2) else [f"colour {i}", f"shade {i}"],
                }
                for i in range(4)
            ]
            for g in range(2)
        ]
        write_parquet(folder / f"part-{part}.parquet", groups, {})


def test_the_worked_example_runs_and_resumes(tmp_path, monkeypatch):
    for name in ("my_family.py", "run.yaml", "train.py"):
        (tmp_path / name).write_text(_block(name), encoding="utf-8")
    _write_data(tmp_path / "vqa_data")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    script = runpy.run_path(str(tmp_path / "train.py"))
    try:
        straight = list(itertools.islice(script["make_loader"](), 6))
        resumed = script["make_loader"]()
        resumed.load_state_dict(torch.load(tmp_path / "data_state.pt", weights_only=False))
        for i, batch in enumerate(itertools.islice(resumed, 3)):
            assert_same_batch(batch, straight[3 + i], f"batch {3 + i}")
    finally:
        # train.py's loaders live in its globals, which its functions point back to: left to
        # the cycle collector, each loader's workers wait out torch's 5 s status interval
        # before they are stopped. Freed here by reference count, they stop at once.
        script["make_loader"].__globals__.clear()
    report = validate_config(script["config"], num_workers=2)
    assert not [w for w in report.warnings if "understanding only" in w], report.warnings
    assert report.groups["my_vqa"].skips == {"parse_row_failed": 1}
    assert "part-1.parquet, row group 0, row 2" in report.groups["my_vqa"].examples["parse_row_failed"]
    assert yaml.safe_load(_block("run.yaml"))["grouped_datasets"]["my_vqa"]["dataset_class"] == "my_family:VQAFamily"


def test_validate_warns_when_the_example_leaves_cfg_on(tmp_path, monkeypatch):
    """The example as it was: its image with CFG on, so vit dropout (0.4 by default) drops
    the image that the answer is about."""
    family = _block("my_family.py").replace(
        ", enable_cfg=False)\n        data = self.add_text", ")\n        data = self.add_text"
    )
    assert family != _block("my_family.py")
    (tmp_path / "cfg_on_family.py").write_text(family, encoding="utf-8")
    (tmp_path / "run.yaml").write_text(_block("run.yaml").replace("my_family:", "cfg_on_family:"), encoding="utf-8")
    _write_data(tmp_path / "vqa_data")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    report = validate_config(load_run_config(str(tmp_path / "run.yaml")), num_workers=2)
    warnings = [w for w in report.warnings if "understanding only" in w]
    assert len(warnings) == 1 and "vit_image" in warnings[0] and "vit_cond_dropout_prob=0.4" in warnings[0]


def _text_example(folder: Path, monkeypatch, entry: dict | None = None):
    """docs/extending.md's section 4 written out in `folder`: the family file, its one
    registry line (undone after the test) and its run config; returns the config."""
    from bagel_data import DATASET_REGISTRY

    for name in ("text_family.py", "register_text.py", "text_run.yaml"):
        (folder / name).write_text(_block(name), encoding="utf-8")
    (folder / "texts").mkdir()
    lines = [json.dumps({"text": f"note number {i} " * (1 + i % 5)}) for i in range(40)] + ["not json"]
    (folder / "texts" / "notes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setitem(DATASET_REGISTRY, "text", None)  # restored (removed) after the test
    runpy.run_path(str(folder / "register_text.py"))
    config = load_run_config(str(folder / "text_run.yaml"))
    if entry is not None:
        config.dataset_info["text"]["notes"].update(entry)
    return config


def _text_dataset(config, tokenizer, special_tokens):
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer, special_tokens=special_tokens, grouped_datasets=config.grouped_datasets,
        dataset_info=config.dataset_info, num_workers=1, **config.packing,
    )  # fmt: skip


def test_a_new_kind_of_family_is_one_file_and_one_registry_line(tmp_path, monkeypatch, tokenizer, special_tokens):
    """The family reads its own dataset_info path and group key through `group_kwargs`, and
    each line is a sample once per pass: the short ones and the bad one counted, by name."""
    config = _text_example(tmp_path, monkeypatch)
    dataset = _text_dataset(config, tokenizer, special_tokens)
    family = dataset.grouped_datasets[0]
    assert type(family).__name__ == "TextFamily" and family.min_chars == 20
    log = family.new_skip_log()
    texts = [tokenizer.decode(sample["text_ids_list"][0]) for _, sample in family.iter_pass(log)]
    kept = [f"note number {i} " * (1 + i % 5) for i in range(40) if i % 5]  # the others: under 20 characters
    assert sorted(texts) == sorted(kept)
    assert log.as_dict() == {"json_invalid": 1, "row_schema_invalid": 8}
    packs = list(itertools.islice(iter(dataset), 2))
    assert all(pack["sequence_length"] <= 320 for pack in packs)


def test_a_dataset_info_key_the_new_family_does_not_read_is_named(tmp_path, monkeypatch, tokenizer, special_tokens):
    config = _text_example(tmp_path, monkeypatch, {"parquet_info_path": "texts/notes.jsonl"})
    with pytest.raises(ConfigError, match=r"TextFamily family does not read these keys") as caught:
        _text_dataset(config, tokenizer, special_tokens)
    assert caught.value.key == "dataset_info.text.notes"


def test_the_new_family_s_path_is_checked_by_its_declaration(tmp_path, monkeypatch, tokenizer, special_tokens):
    config = _text_example(tmp_path, monkeypatch, {"jsonl_path": "texts"})
    with pytest.raises(ConfigError, match="must be a file, but this is a folder") as caught:
        _text_dataset(config, tokenizer, special_tokens)
    assert caught.value.key == "dataset_info.text.notes.jsonl_path"


def test_the_new_family_s_own_dataset_info_key_is_checked_and_read(tmp_path, monkeypatch, tokenizer, special_tokens):
    """`text_key`, a dataset_info key no other family knows, declared in the family file
    alone: checked by its Field's kind, and what the family reads each line by."""
    config = _text_example(tmp_path, monkeypatch, {"text_key": 5})
    with pytest.raises(ConfigError, match="must be a str") as caught:
        _text_dataset(config, tokenizer, special_tokens)
    assert caught.value.key == "dataset_info.text.notes.text_key"
    (tmp_path / "body").mkdir()
    config = _text_example(tmp_path / "body", monkeypatch, {"text_key": "body"})
    family = _text_dataset(config, tokenizer, special_tokens).grouped_datasets[0]
    log = family.new_skip_log()
    assert list(family.iter_pass(log)) == [] and log.as_dict() == {"json_invalid": 41}  # no line has a "body"
