"""`bagel_data.tools.prepare`: raw data -> BAGEL formats, read back by the family readers."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image
from typer.testing import CliRunner

from bagel_data import ImageTransform, SftJSONLIterableDataset, T2IIterableDataset, UnifiedEditIterableDataset
from bagel_data.cli.tools import prepare_app
from bagel_data.errors import ConfigError
from bagel_data.synthetic.dataset import encode_image, photo_like_image
from bagel_data.tools.prepare import prepare_edit, prepare_t2i, prepare_vlm

TRANSFORM = ImageTransform(64, 32, 16)


def _image(path: Path, width: int, height: int, fmt: str = "JPEG", seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_image(photo_like_image(np.random.default_rng(seed), width, height), fmt))
    return path


def _first_pass(dataset) -> list[dict]:
    """Every sample of the first pass over a worker's units (the iterator loops forever)."""
    samples = []
    for cursor, sample in dataset.iter_samples():
        if cursor[0] > 0:
            return samples
        samples.append(sample)
    raise AssertionError("unreachable")


def _expected_shape(size: tuple[int, int]) -> tuple[int, int, int]:
    width, height = TRANSFORM.rule.target_size(*size)
    return (3, height, width)


def _read_t2i(out: Path, tokenizer) -> list[dict]:
    files = sorted(out.glob("*.parquet"))
    dataset = T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(out)], [len(files)], num_workers=1)
    return _first_pass(dataset)


def _check_t2i(samples: list[dict], tokenizer, captions: dict[str, list[str]], sizes: dict[str, tuple[int, int]]):
    """Each sample's caption ids are one of its image's captions, and its tensor has that image's size."""
    owner = {text: name for name, texts in captions.items() for text in texts}
    seen = set()
    for sample in samples:
        text = tokenizer.decode(sample["text_ids_list"][0])
        assert sample["text_ids_list"][0] == tokenizer.encode(text)
        name = owner[text]
        assert tuple(sample["image_tensor_list"][0].shape) == _expected_shape(sizes[name])
        seen.add(name)
    assert seen == set(captions)


# -- T2I ---------------------------------------------------------------------------------------
def _caption_folder(root: Path) -> tuple[dict, dict]:
    sizes = {"a.jpg": (60, 40), "b.png": (48, 64), "c.jpg": (80, 50), "d.jpg": (40, 40), "sub/g.jpg": (70, 36)}
    for index, (name, size) in enumerate(sizes.items()):
        _image(root / name, *size, fmt="PNG" if name.endswith("png") else "JPEG", seed=index)
    (root / "a.txt").write_text("a red kite over the bay\n")
    (root / "b.txt").write_text("first caption of b\n\nsecond caption of b\n")
    # Only caption keys are captions: "short" (a label) and "url" are not.
    c_meta = {"caption": "a small c", "caption_2": "a long caption of c", "short": "logo", "url": "http://x/c"}
    (root / "c.json").write_text(json.dumps(c_meta))
    (root / "d.json").write_text(json.dumps(["d as a list caption"]))
    (root / "sub" / "g.txt").write_text("g in a sub folder")
    _image(root / "e.jpg", 32, 32)  # no caption file
    (root / "f.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    (root / "f.txt").write_text("caption of a broken image")
    (root / "orphan.txt").write_text("a caption without its image")
    (root / "h.jpg").write_bytes((root / "a.jpg").read_bytes())
    (root / "h.json").write_text("{not json")
    _image(root / "i.jpg", 32, 32)
    (root / "i.json").write_text(json.dumps({"short": "logo", "width": 32}))  # no caption key
    captions = {
        "a.jpg": ["a red kite over the bay"],
        "b.png": ["first caption of b", "second caption of b"],
        "c.jpg": ["a small c", "a long caption of c"],
        "d.jpg": ["d as a list caption"],
        "sub/g.jpg": ["g in a sub folder"],
    }
    return captions, sizes


def test_t2i_from_folder_round_trips_through_the_reader(tmp_path, tokenizer):
    captions, sizes = _caption_folder(tmp_path / "raw")
    calls = []
    report = prepare_t2i(
        tmp_path / "raw", tmp_path / "out", rows_per_group=2, rows_per_shard=3, progress=lambda *a: calls.append(a)
    )
    assert report.rows_written == 5
    assert report.dropped_by_reason == {
        "caption_file_without_image": ("orphan.txt",),
        "no_caption": ("e.jpg", "i.jpg"),
        "image_unreadable": ("f.jpg",),
        "caption_file_unreadable": ("h.jpg",),
    }
    no_key = next(note for note in report.dropped if note.location == "i.jpg")
    assert "no caption key (caption, captions, text" in no_key.detail and "short, width" in no_key.detail
    assert report.sources == {".txt": 3, ".json caption": 1, ".json list": 1}
    assert [path.name for path in report.files_written] == ["part-00000.parquet", "part-00001.parquet"]
    groups = [[pq.ParquetFile(p).metadata.row_group(g).num_rows for g in range(pq.ParquetFile(p).num_row_groups)]
              for p in report.files_written]  # fmt: skip
    assert groups == [[2, 1], [2]]
    assert calls[-1][0] == calls[-1][1]
    table = pq.read_table(report.files_written[0])
    assert table.schema.field("image").type == "binary" and table.schema.field("captions").type == "string"
    # Without re-encoding the stored bytes are the file's own.
    assert table.column("image")[0].as_py() == (tmp_path / "raw" / "a.jpg").read_bytes()
    assert json.loads(table.column("captions")[0].as_py()) == {"caption_1": "a red kite over the bay"}
    _check_t2i(_read_t2i(tmp_path / "out", tokenizer), tokenizer, captions, sizes)


def test_t2i_from_csv_manifest_reencodes_and_downscales(tmp_path, tokenizer):
    raw = tmp_path / "raw"
    _image(raw / "img" / "wide.png", 120, 60, fmt="PNG")
    _image(raw / "img" / "tall.jpg", 30, 50)
    (raw / "img" / "bad.jpg").write_bytes(b"garbage")
    rows = [
        {"path": "img/wide.png", "caption": "a wide picture", "caption_1": "", "caption_2": "wide, again"},
        {"path": "img/tall.jpg", "caption": "", "caption_1": "a tall picture", "caption_2": ""},
        {"path": "img/missing.jpg", "caption": "never seen", "caption_1": "", "caption_2": ""},
        {"path": "img/bad.jpg", "caption": "broken", "caption_1": "", "caption_2": ""},
        {"path": "img/wide.png", "caption": "", "caption_1": "", "caption_2": ""},
    ]
    with (raw / "list.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    report = prepare_t2i(raw / "list.csv", tmp_path / "out", reencode="JPEG", max_side=40)
    assert report.rows_written == 2
    assert report.dropped_by_reason == {
        "image_missing": ("list.csv:4",),
        "image_unreadable": ("list.csv:5",),
        "no_caption": ("list.csv:6",),
    }
    table = pq.read_table(report.files_written[0])
    stored = [Image.open(io.BytesIO(data)) for data in table.column("image").to_pylist()]
    assert [(image.format, image.size) for image in stored] == [("JPEG", (40, 20)), ("JPEG", (24, 40))]
    first_captions = json.loads(table.column("captions")[0].as_py())
    assert first_captions == {"caption_1": "a wide picture", "caption_2": "wide, again"}
    captions = {"wide": ["a wide picture", "wide, again"], "tall": ["a tall picture"]}
    _check_t2i(_read_t2i(tmp_path / "out", tokenizer), tokenizer, captions, {"wide": (40, 20), "tall": (24, 40)})


def test_t2i_jsonl_manifest_reports_bad_rows_without_crashing(tmp_path):
    _image(tmp_path / "x.jpg", 40, 30)
    lines = [
        json.dumps({"path": "x.jpg", "captions": {"k1": "one", "k2": "two"}}),
        "{broken json",
        json.dumps({"caption": "no path"}),
        json.dumps(["not", "an", "object"]),
        "",
        json.dumps({"path": "x.jpg", "captions": [1, 2]}),
    ]
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    report = prepare_t2i(tmp_path / "m.jsonl", tmp_path / "out")
    assert report.rows_written == 1
    assert report.dropped_by_reason == {
        "malformed_row": ("m.jsonl:2", "m.jsonl:3", "m.jsonl:4"),
        "caption_file_unreadable": ("m.jsonl:6",),
    }
    assert all(note.detail for note in report.dropped)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_non_utf8_or_deeply_nested_manifest_line_drops_only_its_row(tmp_path, suffix):
    _image(tmp_path / "x.jpg", 40, 30)
    if suffix == ".jsonl":
        lines = [
            json.dumps({"path": "x.jpg", "captions": ["one"]}).encode(),
            b'{"path": "x.jpg", "captions": ["caf\xe9"]}',
            b'{"path": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            json.dumps({"path": "x.jpg", "captions": ["two"]}).encode(),
        ]
        bad = {"malformed_row": ("m.jsonl:2", "m.jsonl:3")}
    else:
        lines = [b"path,caption_1", b"x.jpg,one", b"x.jpg,caf\xe9", b"x.jpg,two"]
        bad = {"malformed_row": ("m.csv:3",)}
    (tmp_path / f"m{suffix}").write_bytes(b"\n".join(lines) + b"\n")
    report = prepare_t2i(tmp_path / f"m{suffix}", tmp_path / "out")
    assert report.rows_written == 2
    assert report.dropped_by_reason == bad


def test_a_deeply_nested_sidecar_caption_drops_only_its_image(tmp_path):
    raw = tmp_path / "raw"
    _image(raw / "a.jpg", 40, 30)
    _image(raw / "b.jpg", 40, 30)
    (raw / "a.txt").write_text("a caption\n")
    (raw / "b.json").write_text("[" * 100_000 + "]" * 100_000)
    report = prepare_t2i(raw, tmp_path / "out")
    assert report.rows_written == 1
    assert report.dropped_by_reason == {"caption_file_unreadable": ("b.jpg",)}


def test_t2i_refuses_a_folder_with_parquet_unless_overwrite(tmp_path):
    _image(tmp_path / "raw" / "a.jpg", 32, 32)
    (tmp_path / "raw" / "a.txt").write_text("a")
    prepare_t2i(tmp_path / "raw", tmp_path / "out")
    with pytest.raises(ConfigError, match="already holds"):
        prepare_t2i(tmp_path / "raw", tmp_path / "out")
    assert prepare_t2i(tmp_path / "raw", tmp_path / "out", overwrite=True).rows_written == 1
    with pytest.raises(ConfigError, match="reencode"):
        prepare_t2i(tmp_path / "raw", tmp_path / "out2", reencode="NOT_A_FORMAT")


# -- edit --------------------------------------------------------------------------------------
def test_edit_round_trips_and_reports_bad_rows(tmp_path, tokenizer):
    for index, name in enumerate(["s0.jpg", "s1.jpg", "s2.jpg", "t0.png", "t1.png"]):
        _image(tmp_path / "img" / name, 48, 40, fmt="PNG" if name.endswith("png") else "JPEG", seed=index)
    rows = [
        {"images": ["s0.jpg", "s1.jpg", "s2.jpg"], "instructions": [["add a ball", "put a ball in"], ["tint it red"]]},
        {"images": ["t0.png", "t1.png"], "instructions": ["make it blue"]},
        {"images": ["s0.jpg"], "instructions": []},
        {"images": ["s0.jpg", "s1.jpg"], "instructions": [["one"], ["two"]]},
        {"images": ["s0.jpg", "gone.jpg"], "instructions": [["x"]]},
        {"images": "s0.jpg", "instructions": [["x"]]},
    ]
    lines = [json.dumps(row) for row in rows[:3]] + ["not json"] + [json.dumps(row) for row in rows[3:]]
    (tmp_path / "edits.jsonl").write_text("\n".join(lines) + "\n")
    report = prepare_edit(tmp_path / "edits.jsonl", tmp_path / "out", rows_per_group=1, rows_per_shard=2,
                          image_root=tmp_path / "img")  # fmt: skip
    assert report.rows_written == 2
    assert report.dropped_by_reason == {
        "fewer_than_two_images": ("edits.jsonl:3",),
        "malformed_row": ("edits.jsonl:4", "edits.jsonl:7"),
        "instruction_count_mismatch": ("edits.jsonl:5",),
        "image_missing": ("edits.jsonl:6",),
    }
    info = json.loads((tmp_path / "out" / "parquet_info.json").read_text())
    # Keyed as BAGEL's reader looks files up: os.path.join(data_dir, name).
    key = os.path.join(os.path.abspath(tmp_path / "out"), "part-00000.parquet")
    assert info == {key: {"num_row_groups": 2, "num_rows": 2}}
    table = pq.read_table(tmp_path / "out" / "part-00000.parquet")
    assert table.column("instruction_list").to_pylist() == [[["add a ball", "put a ball in"], ["tint it red"]],
                                                            [["make it blue"]]]  # fmt: skip
    dataset = UnifiedEditIterableDataset("edit", TRANSFORM, tokenizer, ImageTransform(56, 28, 14),
                                         [str(tmp_path / "out")], [1], info, num_workers=1)  # fmt: skip
    samples = _first_pass(dataset)
    assert sorted([sample["row_key"][0], *sample["row_key"][2:]] for sample in samples) == [[0, 0], [1, 0]]


# -- VLM ---------------------------------------------------------------------------------------
def _turns(*pairs: tuple[str, str]) -> list[dict]:
    return [{"from": role, "value": value} for role, value in pairs]


def test_vlm_fixes_and_drops_llava_json_and_the_reader_takes_every_kept_row(tmp_path, tokenizer):
    for index, name in enumerate(["a.jpg", "b.jpg", "c.jpg"]):
        _image(tmp_path / "images" / name, 40, 30, seed=index)
    rows = [
        {"id": "ok", "image": "a.jpg", "conversations": _turns(("human", "<image>\nWhat is it?"), ("gpt", "A kite."))},
        {"id": "fix", "image": ["b.jpg"], "conversations": _turns(("user", "Describe."), ("assistant", "Blue sky."))},
        {"id": "missing", "image": "nope.jpg", "conversations": _turns(("human", "<image>"), ("gpt", "x"))},
        {"id": "count", "image": ["a.jpg", "c.jpg"], "conversations": _turns(("human", "<image> vs"), ("gpt", "x"))},
        {"id": "no-answer", "conversations": _turns(("human", "hello"))},
        {"id": "malformed", "image": "a.jpg"},
        {"id": "text", "conversations": _turns(("human", "Say hi."), ("gpt", "Hi!"))},
        "not an object",
        {"id": "two", "image": ["a.jpg", "c.jpg"],
         "conversations": _turns(("human", "<image><image>Same?"), ("gpt", "No."))},
    ]  # fmt: skip
    (tmp_path / "llava.json").write_text(json.dumps(rows, indent=1))
    out = tmp_path / "sft" / "train.jsonl"
    report = prepare_vlm(tmp_path / "llava.json", out, image_root=tmp_path / "images")
    assert report.rows_written == 4
    assert report.dropped_by_reason == {
        "image_missing": ("llava.json[2]",),
        "placeholder_mismatch": ("llava.json[3]",),
        "no_gpt_turn": ("llava.json[4]",),
        "malformed_row": ("llava.json[5]", "llava.json[7]"),
    }
    assert report.fixed_by_reason == {
        "roles_renamed": ("llava.json[1]",),
        "image_placeholder_added": ("llava.json[1]",),
    }
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["id"] for row in written] == ["ok", "fix", "text", "two"]
    assert written[0] == rows[0]
    assert written[1]["conversations"] == _turns(("human", "<image>\nDescribe."), ("gpt", "Blue sky."))
    dataset = SftJSONLIterableDataset("vlm", TRANSFORM, tokenizer, None, [str(out)], [str(tmp_path / "images")],
                                      [len(written)], num_workers=1)  # fmt: skip
    samples = _first_pass(dataset)
    assert len(samples) == len(written) and not dataset.skip_log.counts
    images_per_sample = sorted(sum(item["type"] == "vit_image" for item in s["sequence_plan"]) for s in samples)
    assert images_per_sample == [0, 1, 1, 2]


def test_vlm_jsonl_video_rows_and_bad_lines(tmp_path):
    (tmp_path / "media" / "frames").mkdir(parents=True)
    (tmp_path / "media" / "clip.mp4").write_bytes(b"")  # prepare only checks that media exist
    lines = [
        json.dumps({"video": "clip.mp4", "conversations": _turns(("human", "What happens?"), ("gpt", "A pan."))}),
        "{oops",
        json.dumps({"video": "frames/", "conversations": _turns(("human", "<video> and <video>"), ("gpt", "x"))}),
        json.dumps({"video": "gone.mp4", "conversations": _turns(("human", "<video>"), ("gpt", "x"))}),
        json.dumps({"video": "frames/", "conversations": _turns(("human", "<video>Why?"), ("gpt", "Because."))}),
    ]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    report = prepare_vlm(tmp_path / "rows.jsonl", tmp_path / "out.jsonl", image_root=tmp_path / "media")
    assert report.rows_written == 2
    assert report.dropped_by_reason == {
        "malformed_row": ("rows.jsonl:2",),
        "placeholder_mismatch": ("rows.jsonl:3",),
        "video_missing": ("rows.jsonl:4",),
    }
    assert report.fixed_by_reason == {"video_placeholder_added": ("rows.jsonl:1",)}
    first = json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])
    assert first["conversations"][0]["value"] == "<video>\nWhat happens?"


# -- command -----------------------------------------------------------------------------------
def test_prepare_command_prints_the_summary_and_writes_the_report(tmp_path):
    _image(tmp_path / "raw" / "a.jpg", 32, 32)
    (tmp_path / "raw" / "a.txt").write_text("a caption")
    _image(tmp_path / "raw" / "b.jpg", 32, 32)
    args = ["t2i", str(tmp_path / "raw"), str(tmp_path / "out"), "--report", str(tmp_path / "r.json")]
    result = CliRunner().invoke(prepare_app, [*args, "--allow-drops"])  # 1 of 2 rows dropped: over the 10 % line
    assert result.exit_code == 0, result.output
    assert "rows written" in result.output and "no_caption" in result.output
    assert "captions from .txt" in result.output
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["rows_written"] == 1 and saved["dropped"][0]["location"] == "b.jpg"
    again = CliRunner().invoke(prepare_app, ["t2i", str(tmp_path / "raw"), str(tmp_path / "out")])
    assert again.exit_code == 2 and "already holds" in " ".join(again.output.split())


def test_edit_list_mismatch_counts_agree_with_their_nouns(tmp_path):
    for name in ("a.png", "b.png"):
        _image(tmp_path / name, 16, 16, fmt="PNG")
    row = {"images": ["a.png", "b.png"], "instructions": [["one"], ["two"]]}
    (tmp_path / "e.jsonl").write_text(json.dumps(row) + "\n")
    report = prepare_edit(tmp_path / "e.jsonl", tmp_path / "out")
    assert [note.detail for note in report.dropped] == ["2 images need 1 step, got 2"]
