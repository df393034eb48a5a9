"""`validate` is a guarantee: every row a run skips, validate reported first.

Small T2I and edit datasets are generated with random image sizes, chain lengths, phrasings
of random length and some broken rows; the budget is drawn low enough that some samples
exceed it only for some random draws (an edit chain's longest stretch, a T2I row's longest
caption). The run reads several passes (each pass draws again); every (reason, row) it
skips must be among validate's findings.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bagel_data import make_bagel_multimodal_dataset
from bagel_data.errors import SkipLog
from bagel_data.families.edit import UnifiedEditIterableDataset, choose_steps
from bagel_data.families.worst_case import edit_worst_length
from bagel_data.media.images import ImageTransform
from bagel_data.sample import sample_length
from bagel_data.tools.run import RunConfig
from bagel_data.tools.validate import validate_config
from helpers.builders import png_bytes, t2i_run_config, write_edit, write_t2i

WORDS = ("red", "blue", "make", "the", "sky", "brighter", "add", "a", "small", "cat", "tree", "into", "night")
VAE = {"image_stride": 16, "max_image_size": 64, "min_image_size": 16}
VIT = {"image_stride": 14, "max_image_size": 56, "min_image_size": 14}

sides = st.integers(8, 96)
images = st.builds(lambda w, h, c: png_bytes(w, h, (c, 40, 90)), sides, sides, st.integers(0, 255))
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=25).map(" ".join)
broken = st.sampled_from([b"not an image", b"\x89PNG\r\n\x1a\n broken"])


@st.composite
def edit_rows(draw):
    chain = draw(st.lists(images, min_size=2, max_size=4))
    phrasings = [draw(st.lists(texts, min_size=1, max_size=3)) for _ in chain[1:]]
    kind = draw(st.sampled_from(["good"] * 6 + ["undecodable", "lists_disagree", "one_image"]))
    if kind == "undecodable":
        chain[draw(st.integers(0, len(chain) - 1))] = draw(broken)
    elif kind == "lists_disagree":
        phrasings = phrasings + [["extra"]]
    elif kind == "one_image":
        chain, phrasings = chain[:1], []
    return {"image_list": chain, "instruction_list": phrasings}


@st.composite
def t2i_rows(draw):
    captions = {f"c{i}": t for i, t in enumerate(draw(st.lists(texts, min_size=1, max_size=3)))}
    kind = draw(st.sampled_from(["good"] * 6 + ["undecodable", "caption_not_json"]))
    image = draw(broken) if kind == "undecodable" else draw(images)
    return {"image": image, "captions": "{not json" if kind == "caption_not_json" else captions}


def files(rows):
    return st.lists(st.lists(st.lists(rows, min_size=1, max_size=3), min_size=1, max_size=2), min_size=1, max_size=2)


class _Enough(BaseException):
    """Ends a run that only skips (every row bad or over budget never yields a pack).

    Not an `Exception`: raised from inside a row's build (the edit family skips a row from
    there), it must not be caught as the row's own error and counted as one more skip."""


def recorded_skips(monkeypatch, limit: int | None = None) -> set:
    found = set()
    original = SkipLog.skip
    calls = itertools.count()

    def record(self, reason, location, detail=""):
        found.add((self.dataset_name, reason.value, location))
        original(self, reason, location, detail)
        if limit is not None and next(calls) >= limit:
            raise _Enough

    monkeypatch.setattr(SkipLog, "skip", record)
    return found


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(edit_files=files(edit_rows()), t2i_files=files(t2i_rows()), budget=st.integers(40, 160))
def test_run_skips_are_a_subset_of_validate_findings(
    tmp_path_factory, monkeypatch, tokenizer, special_tokens, edit_files, t2i_files, budget
):
    root = tmp_path_factory.mktemp("guarantee")
    write_t2i(root / "t2i", t2i_files)
    write_edit(root / "edit", edit_files)
    info = {
        "t2i_pretrain": {"t2i": {"data_dir": str(root / "t2i"), "num_files": len(t2i_files)}},
        "unified_edit": {
            "edit": {"data_dir": str(root / "edit"), "parquet_info_path": str(root / "edit" / "parquet_info.json")}
        },
    }
    grouped = {
        "t2i_pretrain": {"dataset_names": ["t2i"], "image_transform_args": VAE, "num_used_data": [2], "weight": 1},
        "unified_edit": {
            "dataset_names": ["edit"], "image_transform_args": VAE, "vit_image_transform_args": VIT,
            "num_used_data": [2], "weight": 1,
        },
    }  # fmt: skip
    packing = {
        "expected_num_tokens": budget, "max_num_tokens": 2 * budget, "max_num_tokens_per_sample": budget,
        "prefer_buffer_before": budget, "max_buffer_size": 4, "max_consecutive_failures": 10**6,
    }  # fmt: skip
    with monkeypatch.context() as patch:
        found_by_validate = recorded_skips(patch)
        report = validate_config(RunConfig(grouped, info, dict(packing)), num_workers=1, tokenizer=tokenizer)
    with monkeypatch.context() as patch:
        skipped_by_run = recorded_skips(patch, limit=400)
        dataset = make_bagel_multimodal_dataset(
            tokenizer, special_tokens, grouped, dataset_info=info, local_rank=0, world_size=1, num_workers=1,
            **packing,
        )  # fmt: skip
        try:
            for _ in itertools.islice(iter(dataset), 40):  # several passes over these few rows
                pass
        except _Enough:
            pass
    # Row by row: a chain with one undecodable image is reported as such, while a run whose
    # draw misses that image may skip the row for its length instead.
    rows_found = {(group, location) for group, _, location in found_by_validate}
    rows_skipped = {(group, location) for group, _, location in skipped_by_run}
    assert rows_skipped <= rows_found, sorted(skipped_by_run - found_by_validate)
    clean_rows = {row for row in rows_found if not any(r[2] == row[1] and "image" in r[1] for r in found_by_validate)}
    reasons = {(g, r, loc) for g, r, loc in skipped_by_run if (g, loc) in clean_rows}
    assert reasons <= found_by_validate, "the same reason for rows whose images all decode"
    assert report.ok == (not found_by_validate)


def test_the_worst_case_of_an_edit_row_bounds_every_draw_and_is_reached(tmp_path, tokenizer):
    import numpy as np

    vae, vit = ImageTransform(64, 16, 16), ImageTransform(56, 14, 14)
    chain = [png_bytes(96, 64), png_bytes(30, 90), png_bytes(64, 64), png_bytes(20, 20)]
    phrasings = [["a"], ["add a small cat to the left", "cat"], ["make the sky brighter and add a tree", "x"]]
    _, info = write_edit(tmp_path, [[[{"image_list": chain, "instruction_list": phrasings}]]])
    family = UnifiedEditIterableDataset("edit", vae, tokenizer, vit, [str(tmp_path)], [1], info, num_workers=1)
    worst = edit_worst_length(family, chain, phrasings)
    seen = set()
    for seed in range(300):
        builder = family.build_sample(chain, phrasings, np.random.default_rng(seed), "here", SkipLog("edit"))
        length = sample_length({"num_tokens": builder.num_tokens, "sequence_plan": builder.sequence_plan})
        seen.add(length)
        assert length <= worst
    assert max(seen) == worst, "the bound is the longest draw, not a loose guess"
    assert len({choose_steps(np.random.default_rng(s), len(chain)) for s in range(300)}) > 1


def test_run_validate_and_inspect_share_the_topology_options():
    from typer.testing import CliRunner

    from bagel_data.cli.main import app

    for command in ("run", "validate", "inspect"):
        result = CliRunner().invoke(app, [command, "--help"])
        assert "--num-workers" in result.output and "--world-size" in result.output, command
        assert "[default: 2]" in result.output.split("--num-workers")[1].split("--")[0], command


def test_the_worst_case_of_an_image_row_is_its_sample_s_exact_length(tmp_path, tokenizer):
    """No frames to vary: the bound is the row's one sample in a pack (begin/end tokens of
    every item included), not a looser guess."""
    from bagel_data.families.vlm import SftJSONLIterableDataset
    from bagel_data.families.worst_case import vlm_worst_length
    from helpers.builders import write_vlm

    turns = [{"from": "human", "value": "<image> describe it"}, {"from": "gpt", "value": "a grey square, small"}]
    jsonl, image_dir = write_vlm(
        tmp_path, [{"image": "a.png", "conversations": turns}], images={"a.png": png_bytes(60, 40)}
    )
    family = SftJSONLIterableDataset(
        "vlm", ImageTransform(56, 28, 14), tokenizer, None, [jsonl], [image_dir], [1], num_workers=1
    )
    family.set_epoch(0)
    shard = family.worker_shard()
    samples = list(family.unit_samples(shard, 0, int(shard.unit_ids[0]), SkipLog("vlm")))
    assert len(samples) == 1 and len(samples[0]["sequence_plan"]) >= 3
    assert vlm_worst_length(family, samples[0]) == sample_length(samples[0])


def test_validate_measures_every_row_of_a_t2i_unit(tmp_path, tokenizer):
    """The worst-case walk starts at the unit's first row group and row: a row it skipped
    would be a row validate cannot vouch for."""
    from bagel_data import T2IIterableDataset

    row = {"image": png_bytes(40, 30, (9, 99, 200)), "captions": {"a": "short", "b": "a longer caption here"}}
    write_t2i(tmp_path, [[[row] * 2, [row] * 3]])  # one file, row groups of 2 and 3 rows
    family = T2IIterableDataset("t2i", ImageTransform(64, 32, 16), tokenizer, [str(tmp_path)], [1], num_workers=1)
    log = SkipLog("t2i")
    rows = list(family.worst_case_rows(family.worker_shard(), 0, 0, log))
    assert [location.split(", ", 1)[1] for location, _ in rows] == [
        "row group 0, row 0", "row group 0, row 1", "row group 1, row 0", "row group 1, row 1", "row group 1, row 2",
    ]  # fmt: skip
    assert len({length for _, length in rows}) == 1 and not log.counts


def test_a_file_repeated_to_fill_num_used_data_is_walked_once(tmp_path, tokenizer):
    """`num_used_data` past the files repeats them; validate checks each file once, so its
    rows and skips are counted once, not once per repeat."""
    good = {"image": png_bytes(40, 30, (9, 99, 200)), "captions": {"a": "a small blue square"}}
    bad = {"image": b"not an image", "captions": {"a": "never decoded"}}
    run = t2i_run_config(tmp_path / "t2i", [[[good, bad, good]]], budget=512, num_used_data=3)
    report = validate_config(run, num_workers=1, tokenizer=tokenizer)
    group = report.groups["t2i_pretrain"]
    assert group.units == 3  # the one file, three times
    assert (group.rows_checked, group.samples, group.skips) == (3, 2, {"image_decode_failed": 1})
