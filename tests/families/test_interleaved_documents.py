"""One interleaved document at a time: `parse_row`'s plan for each kind of segment and role,
its refusals, and the JSONL lines that are not documents. (test_interleaved.py checks the
packed batches; test_interleaved_rules.py the group defaults on their own.)"""

from __future__ import annotations

import pytest

from bagel_data import ImageTransform
from bagel_data.families.interleaved import InterleavedIterableDataset
from bagel_data.families.interleaved_base import Row
from helpers.builders import png_bytes
from helpers.interleaved import write_interleaved

IMG = png_bytes(64, 64, (20, 200, 30))


def text(words, **flags):
    return {"type": "text", "text": words, **flags}


def image(**flags):
    return {"type": "image", "image": IMG, **flags}


def video(n, **flags):
    return {"type": "video", "frames": [IMG] * n, **flags}


@pytest.fixture
def make_family(tmp_path, tokenizer):
    folder = tmp_path / "docs"
    write_interleaved(folder / "part-0.parquet", [[[text("one", supervised=True)]]])

    def make(**segment_defaults):
        family = InterleavedIterableDataset(
            "il", ImageTransform(64, 32, 16), tokenizer, ImageTransform(56, 28, 14), [str(folder)], [1],
            num_workers=1, segment_defaults=segment_defaults or None,
        )  # fmt: skip
        family._image_root = str(folder)  # as while reading that folder's shard
        return family

    return make


def plan(family, segments) -> list[tuple[str, int, int]]:
    data = family.parse_row(Row({"segments": segments}, 0))
    return [(item["type"], item["loss"], item["enable_cfg"]) for item in data["sequence_plan"]]


def test_unmarked_images_take_the_first_and_later_defaults(make_family):
    family = make_family()
    doc = [text("look"), image(), text("now draw"), image(), text("done")]
    assert plan(family, doc) == [
        ("text", 1, 1),
        ("vae_image", 0, 1),  # the first image: conditioned and understood
        ("vit_image", 0, 1),
        ("text", 1, 1),
        ("vae_image", 1, 0),  # a later one: generated, conditioned and understood
        ("vae_image", 0, 1),
        ("vit_image", 0, 1),
        ("text", 1, 1),
    ]


def test_a_generated_image_ending_the_document_is_only_generated(make_family):
    # Nothing follows it, so conditioning on it or understanding it would feed nothing.
    assert plan(make_family(), [text("draw"), image(), text("again"), image()])[-1:] == [("vae_image", 1, 0)]
    assert len(plan(make_family(), [text("draw"), image(), text("again"), image()])) == 5
    only = make_family(first_image=["generated", "understood"])
    assert plan(only, [text("draw", supervised=False), image()]) == [("text", 0, 1), ("vae_image", 1, 0)]
    # a last image the defaults do not generate keeps its roles
    kept = make_family(first_image=["conditioned", "understood"])
    assert plan(kept, [text("see"), image()]) == [("text", 1, 1), ("vae_image", 0, 1), ("vit_image", 0, 1)]


def test_a_segment_that_sets_some_roles_has_exactly_those(make_family):
    family = make_family()
    doc = [text("see"), image(understood=True), text("and"), image(conditioned=True, cfg=False), text("end")]
    assert plan(family, doc) == [
        ("text", 1, 1),
        ("vit_image", 0, 1),
        ("text", 1, 1),
        ("vae_image", 0, 0),
        ("text", 1, 1),
    ]
    # a role set to null is left out, like an absent one: the others decide alone
    assert plan(family, [image(generated=True, understood=None), text("x")])[:1] == [("vae_image", 1, 0)]


def test_text_flags_and_the_group_cfg_default(make_family):
    family = make_family(cfg=False, text_loss="none")
    doc = [text("a"), text("b", supervised=True), text("c", cfg=True, supervised=False), image(generated=True)]
    assert plan(family, doc) == [("text", 0, 0), ("text", 1, 0), ("text", 0, 1), ("vae_image", 1, 0)]


def test_an_image_path_is_read_relative_to_the_shard_folder_or_as_given(make_family, tmp_path):
    family = make_family()
    (tmp_path / "docs" / "sub").mkdir()
    (tmp_path / "docs" / "sub" / "a.png").write_bytes(IMG)
    relative = {"type": "image", "path": "sub/a.png", "understood": True}
    absolute = {"type": "image", "path": str(tmp_path / "docs" / "sub" / "a.png"), "understood": True}
    for segment in (relative, absolute):
        assert plan(family, [segment, text("what")]) == [("vit_image", 0, 1), ("text", 1, 1)]
    # bytes win over a path when a segment has both
    both = {"type": "image", "image": IMG, "path": "missing.png", "understood": True}
    assert plan(family, [both, text("what")])[0] == ("vit_image", 0, 1)
    with pytest.raises(FileNotFoundError):
        plan(family, [{"type": "image", "path": "sub/b.png", "understood": True}, text("what")])


def test_a_video_is_generated_by_default_or_as_its_roles_say(make_family):
    family = make_family()
    assert plan(family, [text("film", supervised=False), video(2)]) == [("text", 0, 1)] + [("vae_image", 1, 0)] * 2
    conditioned = plan(family, [video(2, conditioned=True), text("what happens")])
    assert conditioned == [("vae_image", 0, 1)] * 2 + [("text", 1, 1)]
    # the segment's roles replace the default: generated=False alone leaves no role at all
    with pytest.raises(ValueError, match="video segment 0 must be exactly one of generated or conditioned"):
        plan(family, [video(2, generated=False), text("x")])
    with pytest.raises(ValueError, match="exactly one"):
        plan(family, [video(2, generated=True, conditioned=True), text("x")])
    by_default = make_family(video="conditioned")
    assert plan(by_default, [video(1), text("x")]) == [("vae_image", 0, 1), ("text", 1, 1)]


def test_video_frames_without_indexes_are_numbered_in_order(make_family):
    data = make_family().parse_row(Row({"segments": [text("clip", supervised=False), video(3)]}, 0))
    frames = data["sequence_plan"][1:]
    assert [f.get("frame_delta") for f in frames] == [1, 1, None]
    spaced = [text("clip", supervised=False), dict(video(3), frame_indexes=[0, 4, 9])]
    frames = make_family().parse_row(Row({"segments": spaced}, 0))["sequence_plan"][1:]
    assert [f.get("frame_delta") for f in frames] == [4, 5, None]


@pytest.mark.parametrize(
    "segments, message",
    [
        ([], "'segments' must be a non-empty list"),
        ("text", "'segments' must be a non-empty list"),
        ([text("a"), "b"], "segment 1 is not an object"),
        ([{"type": "text", "text": 3}], "text segment 0 has no 'text' string"),
        ([text("a"), {"type": "sound"}], "segment 1 has type 'sound'"),
        ([{"type": "image", "understood": True}, text("a")], "image segment 0 has neither 'image' bytes nor a 'path'"),
        ([image(understood=False, generated=False), text("a")], "image segment 0 has no role"),
        ([text("a", supervised=False), image(understood=True)], "trains nothing"),
        ([text("a"), {"type": "video", "frames": []}], "video segment 1 has neither 'frames' nor a 'path'"),
        ([text("a", supervised="yes")], "'supervised' must be true, false or null"),
    ],
)
def test_a_malformed_document_is_refused_with_a_reason(make_family, segments, message):
    with pytest.raises(ValueError, match=message):
        plan(make_family(), segments)


def test_jsonl_lines_that_are_not_documents_are_counted_skips(tmp_path, tokenizer):
    lines = ['{"segments": [{"type": "text", "text": "fine", "supervised": true}]}', "{not json", "[1, 2]"]
    (tmp_path / "docs.jsonl").write_text("\n".join(lines) + "\n")
    family = InterleavedIterableDataset(
        "il", ImageTransform(64, 32, 16), tokenizer, ImageTransform(56, 28, 14), [str(tmp_path)], [3],
        num_workers=1, jsonl_path_list=[str(tmp_path / "docs.jsonl")],
    )  # fmt: skip
    kind = family.units.kind
    assert kind.depth == 0 and list(kind.sorted_units(family.data_paths)) == [0, 1, 2]
    assert kind.input_paths(family.data_paths) == [str(tmp_path / "docs.jsonl")]
    log = family.new_skip_log()
    samples = list(family.iter_pass(log, 0, family.worker_shard()))
    assert len(samples) == 1
    assert log.as_dict() == {"json_invalid": 1, "row_schema_invalid": 1}
    assert "docs.jsonl, line 2" in log.examples["json_invalid"]
    assert "must be a JSON object with 'segments'" in log.examples["row_schema_invalid"]
