"""A user's own family, written the BAGEL way, wired without editing the library.

The family lives in a temporary module and uses the reference's underscore builders and a
per-row choice from `self.rng`; one row raises in `parse_row`. It is wired by YAML
(`dataset_class`) or by `DATASET_REGISTRY`, packed through a 2-worker StatefulDataLoader and
resumed from a checkpoint.
"""

from __future__ import annotations

import itertools
import pickle
import textwrap

import pytest

from bagel_data import DATASET_REGISTRY, ConfigError, build_dataloader, make_bagel_multimodal_dataset
from bagel_data.checkpoint.collect import worker_dataset_states
from bagel_data.families.interleaved_base import Row
from bagel_data.families.parquet_standard import parsed
from bagel_data.packing.invariants import check_batch
from helpers.batches import assert_same_batch
from helpers.builders import png_bytes, write_parquet

MODULE = """
from PIL import Image
import io

from bagel_data import InterleavedBaseIterableDataset, ParquetStandardIterableDataset


class CaptionFamily(InterleavedBaseIterableDataset, ParquetStandardIterableDataset):
    def parse_row(self, row):
        if row["caption"] == "BAD":
            raise ValueError("this row is broken on purpose")
        data = self._init_data()
        image = Image.open(io.BytesIO(row["image"])).convert("RGB")
        data = self._add_image(data, image, need_loss=False, need_vae=False, need_vit=True)
        phrasing = self.rng.choice(["Describe: ", "Caption: "])
        return self._add_text(data, phrasing + row["caption"], need_loss=True, enable_cfg=False)


class PrefixFamily(CaptionFamily):
    GROUP_KEYS = CaptionFamily.GROUP_KEYS | {"prefix"}

    def __init__(self, *args, prefix="", **kwargs):
        self.prefix = prefix
        super().__init__(*args, **kwargs)

    def parse_row(self, row):
        data = self.init_data()
        return self.add_text(data, self.prefix + row["caption"], need_loss=True)


class SkipFirstFamily(CaptionFamily):
    def parse_row(self, row):
        return {} if row.name == 0 else super().parse_row(row)


class LongOrShortFamily(CaptionFamily):
    # A row is 1 or 150 words, drawn per sample: one draw says little about its worst case.

    def parse_row(self, row):
        data = self.init_data()
        return self.add_text(data, "word " * self.rng.choice([1, 150]), need_loss=True)


class CountingFamily(CaptionFamily):
    # The n-th parse_row call of this instance is n words long: later draws are longer.

    def parse_row(self, row):
        self.calls = getattr(self, "calls", 0) + 1
        data = self.init_data()
        return self.add_text(data, "word " * self.calls, need_loss=True)


class DeclaredWorstFamily(CaptionFamily):
    # A family that knows its longest sample and reports it to validate itself.

    def worst_case_rows(self, shard, index, unit_id, log):
        for sample in self.unit_samples(shard, index, unit_id, log):
            yield self.row_location(sample["row_key"]), 10_000


class NotAFamily:
    pass
"""

GROUP = {
    "dataset_names": ["captions"],
    "image_transform_args": {"image_stride": 16, "max_image_size": 64, "min_image_size": 32},
    "vit_image_transform_args": {"image_stride": 14, "max_image_size": 56, "min_image_size": 28},
    "num_used_data": [2],
    "weight": 1,
}
PACKING = dict(expected_num_tokens=150, max_num_tokens=200, max_num_tokens_per_sample=120, prefer_buffer_before=80)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    package = tmp_path / "user_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "families.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "user_pkg.families"


@pytest.fixture
def info(tmp_path):
    groups = [
        [{"image": png_bytes(40, 40, (i * 20, 0, 0)), "caption": f"picture {g}-{i}"} for i in range(3)]
        for g in range(4)
    ]
    groups[1][1]["caption"] = "BAD"
    (tmp_path / "data").mkdir()
    for part in range(2):
        write_parquet(tmp_path / "data" / f"part-{part}.parquet", groups[2 * part : 2 * part + 2], {})
    return {"data_dir": str(tmp_path / "data")}


def build(tokenizer, special_tokens, group_name, group, info):
    return make_bagel_multimodal_dataset(
        tokenizer=tokenizer,
        special_tokens=special_tokens,
        grouped_datasets={group_name: group},
        dataset_info={group_name: {"captions": info}},
        num_workers=2,
        data_seed=3,
        **PACKING,
    )


def test_dataset_class_family_packs_resumes_and_skips_by_name(tokenizer, special_tokens, user_module, info):
    group = dict(GROUP, dataset_class=f"{user_module}:CaptionFamily")

    def make():
        return build(tokenizer, special_tokens, "my_captions", group, info)

    dataset = make()
    total, cut = 8, 3
    loader = build_dataloader(dataset, num_workers=2)
    reference = list(itertools.islice(loader, total))
    for batch in reference:
        check_batch(batch.to_dict(), dataset.config, dataset.special_tokens)
    skips = [state["skips"].get("my_captions", {}) for state in worker_dataset_states(loader.state_dict())]
    assert sum(s.get("parse_row_failed", 0) for s in skips) >= 1
    first = build_dataloader(make(), num_workers=2)
    consumed = list(itertools.islice(first, cut))
    checkpoint = pickle.loads(pickle.dumps(first.state_dict()))
    del first
    resumed = build_dataloader(make(), num_workers=2)
    resumed.load_state_dict(checkpoint)
    for i, batch in enumerate(itertools.chain(consumed, itertools.islice(resumed, total - cut))):
        assert_same_batch(batch, reference[i], f"batch {i}")


def test_registry_entry_packs_a_user_class(tokenizer, special_tokens, user_module, info, monkeypatch):
    import importlib

    family = importlib.import_module(user_module).CaptionFamily
    monkeypatch.setitem(DATASET_REGISTRY, "my_group", family)
    dataset = build(tokenizer, special_tokens, "my_group", GROUP, info)
    assert type(dataset.grouped_datasets[0]) is family
    batch = next(iter(dataset))
    check_batch(batch, dataset.config, dataset.special_tokens)
    assert {where["dataset_name"] for where in batch["batch_data_indexes"]} == {"my_group"}


def test_parse_row_failure_names_file_row_group_and_row(tokenizer, special_tokens, user_module, info):
    group = dict(GROUP, dataset_class=f"{user_module}:CaptionFamily")
    family = build(tokenizer, special_tokens, "g", group, info).grouped_datasets[0]
    log = family.new_skip_log()
    samples = list(family.iter_pass(log))
    assert len(samples) == 11 and log.as_dict() == {"parse_row_failed": 1}
    assert "part-0.parquet, row group 1, row 1" in log.examples["parse_row_failed"]
    family.strict = True
    with pytest.raises(Exception, match="parse_row_failed.*row group 1, row 1"):
        list(family.iter_pass(family.new_skip_log()))


def test_row_choices_come_from_the_row_not_the_reader(tokenizer, special_tokens, user_module, info):
    group = dict(GROUP, dataset_class=f"{user_module}:CaptionFamily")
    family = build(tokenizer, special_tokens, "g", group, info).grouped_datasets[0]
    shard = family.worker_shard()
    once = [s["text_ids_list"] for _, s in family.iter_pass(family.new_skip_log(), 0, shard)]
    again = [s["text_ids_list"] for _, s in family.iter_pass(family.new_skip_log(), 0, shard)]
    assert once == again
    assert len({tokenizer.decode(ids[0])[:8] for ids in once}) == 2  # both phrasings occur


@pytest.mark.parametrize(
    ("dataset_class", "message"),
    [
        ("user_pkg.nowhere:CaptionFamily", "cannot import"),
        ("user_pkg.families:Missing", "has no 'Missing'"),
        ("user_pkg.families.CaptionFamily", "package.module:ClassName"),
        ("user_pkg.families:NotAFamily", "subclass bagel_data.InterleavedBaseIterableDataset"),
    ],
)
def test_bad_dataset_class_is_a_config_error(tokenizer, special_tokens, user_module, info, dataset_class, message):
    group = dict(GROUP, dataset_class=dataset_class)
    with pytest.raises(ConfigError, match=message) as error:
        build(tokenizer, special_tokens, "mine", group, info)
    assert "mine" in str(error.value)


@pytest.mark.parametrize("body", ["raise RuntimeError('no GPU here')", "1 / 0", "import json\njson.loads('{')"])
def test_a_module_that_fails_to_import_is_a_config_error_naming_it(
    tokenizer, special_tokens, tmp_path, monkeypatch, info, body
):
    (tmp_path / "broken_family.py").write_text(body + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    group = dict(GROUP, dataset_class="broken_family:Family")
    with pytest.raises(ConfigError, match="importing 'broken_family' raised .*fix that module"):
        build(tokenizer, special_tokens, "mine", group, info)


def test_registry_entry_that_is_not_a_family(tokenizer, special_tokens, info, monkeypatch):
    monkeypatch.setitem(DATASET_REGISTRY, "odd", dict)
    with pytest.raises(ConfigError, match="DATASET_REGISTRY\\['odd'\\]"):
        build(tokenizer, special_tokens, "odd", GROUP, info)


def test_validate_walks_a_user_family_through_parse_row(user_module, info):
    from bagel_data.tools.run import RunConfig
    from bagel_data.tools.validate import validate_config

    group = dict(GROUP, dataset_class=f"{user_module}:CaptionFamily")
    config = RunConfig({"mine": group}, {"mine": {"captions": info}}, dict(PACKING))
    report = validate_config(config, num_workers=2)
    assert not report.ok
    assert report.groups["mine"].samples == 11
    assert report.groups["mine"].skips == {"parse_row_failed": 1}
    assert any("parse_row_failed" in error and "row group 1, row 1" in error for error in report.errors)


def _validate_family(user_module, info, name: str):
    from bagel_data.tools.run import RunConfig
    from bagel_data.tools.validate import validate_config

    group = dict(GROUP, dataset_class=f"{user_module}:{name}")
    return validate_config(RunConfig({"mine": group}, {"mine": {"captions": info}}, dict(PACKING)), num_workers=2)


def test_validate_takes_a_parse_row_familys_longest_draw(user_module, info):
    """Every row can draw 150 words, over the 120-token budget: validate must say so for
    each row, although the run's own draw is short for about half of them."""
    report = _validate_family(user_module, info, "LongOrShortFamily")
    group = report.groups["mine"]
    assert group.over_budget == 12 and group.samples == 0
    assert group.lengths["max"] > PACKING["max_num_tokens_per_sample"]


def test_validate_asks_a_user_family_for_its_worst_case(user_module, info):
    report = _validate_family(user_module, info, "DeclaredWorstFamily")
    group = report.groups["mine"]
    assert group.lengths["max"] == 10_000 and group.over_budget == group.rows_checked - 1  # the BAD row is skipped
    assert not report.ok


def test_a_family_s_own_group_keys_reach_its_constructor(tokenizer, special_tokens, user_module, info):
    group = dict(GROUP, dataset_class=f"{user_module}:PrefixFamily", prefix="Say: ")
    family = build(tokenizer, special_tokens, "g", group, info).grouped_datasets[0]
    _, sample = next(family.iter_samples())
    assert tokenizer.decode(sample["text_ids_list"][0]).startswith("Say: picture")
    with pytest.raises(ConfigError, match="prefix"):
        build(tokenizer, special_tokens, "g", dict(group, dataset_class=f"{user_module}:CaptionFamily"), info)


def _captions(batch, tokenizer) -> list[str]:
    import re

    batch = batch.to_dict()
    ids, positions = batch["packed_text_ids"].tolist(), batch["packed_text_indexes"].tolist()
    found, start = [], 0
    for length in batch["sample_lens"][: len(batch["batch_data_indexes"])]:
        text = tokenizer.decode([i for i, p in zip(ids, positions) if start <= p < start + length])
        found += re.findall(r"picture \d-\d", text)
        start += length
    return found


def test_elastic_restart_of_a_user_family(tokenizer, special_tokens, user_module, tmp_path):
    rows = [[{"image": png_bytes(40, 40), "caption": f"picture {g}-{i}"} for i in range(6)] for g in range(8)]
    (tmp_path / "many").mkdir()
    for part in range(2):
        write_parquet(tmp_path / "many" / f"part-{part}.parquet", rows[4 * part : 4 * part + 4], {})
    every = {f"picture {g}-{i}" for g in range(8) for i in range(6)}
    group = dict(GROUP, dataset_class=f"{user_module}:CaptionFamily")
    info = {"data_dir": str(tmp_path / "many")}
    loader = build_dataloader(build(tokenizer, special_tokens, "mine", group, info), num_workers=2)
    before = [c for batch in itertools.islice(loader, 2) for c in _captions(batch, tokenizer)]
    states = worker_dataset_states(loader.state_dict())
    assert len(before) == len(set(before)) < len(every)
    new = make_bagel_multimodal_dataset(
        tokenizer=tokenizer, special_tokens=special_tokens, grouped_datasets={"mine": group},
        dataset_info={"mine": {"captions": info}}, num_workers=1, data_seed=3, **PACKING,
    )  # fmt: skip
    new.load_elastic_state(states)
    after = []
    for batch in build_dataloader(new, num_workers=1):
        after += _captions(batch, tokenizer)
        if len(after) >= len(every) - len(before):
            break
    rest = after[: len(every) - len(before)]
    assert len(set(rest)) == len(rest)  # nothing twice before every row was read once
    assert set(rest) | set(before) == every


def test_an_empty_result_is_a_named_skip(tokenizer, special_tokens, user_module, info):
    group = dict(GROUP, dataset_class=f"{user_module}:SkipFirstFamily")
    family = build(tokenizer, special_tokens, "g", group, info).grouped_datasets[0]
    log = family.new_skip_log()
    samples = list(family.iter_pass(log))
    assert len(samples) == 7
    assert log.as_dict() == {"parse_row_returned_nothing": 4, "parse_row_failed": 1}


def test_row_reads_like_the_reference_s_pandas_row():
    from bagel_data.families.interleaved_base import Row

    row = Row({"caption": "a cat", "image_list": [b"x"]}, 5)
    assert row["caption"] == row.caption == "a cat" and row.name == 5
    assert list(row) == ["caption", "image_list"] and "image_list" in row and row.get("nope") is None
    with pytest.raises(KeyError, match="no column 'nope'"):
        row["nope"]


@pytest.mark.parametrize("draws", [8, 3])
def test_validate_measures_each_row_over_worst_case_draws_draws(tokenizer, special_tokens, user_module, info, draws):
    """Exactly `worst_case_draws` parses per row (the run's own and the others), and the
    longest one is the row's length."""
    group = dict(GROUP, dataset_class=f"{user_module}:CountingFamily")
    family = build(tokenizer, special_tokens, "mine", group, info).grouped_datasets[0]
    family.worst_case_draws = draws
    log = family.new_skip_log()
    rows = list(family.worst_case_rows(None, 0, 0, log))
    assert len(rows) == 3 and family.calls == 3 * draws
    lengths = [length for _, length in rows]
    assert lengths == sorted(set(lengths))  # each row's last (longest) draw, longer row after row
    family.calls = 0
    first = parsed(family, Row({"caption": "x"}, 0), family.sample_rng(0, 0, 0), "here", log)
    assert lengths[0] > first.num_tokens + 2 * len(first.sequence_plan)  # longer than one draw gives
