"""`prepare` that writes nothing fails with the likely cause; `prepare vlm` decodes what it keeps."""

from __future__ import annotations

import json

from PIL import Image
from typer.testing import CliRunner

from bagel_data.cli.tools import prepare_app
from bagel_data.tools.prepare import prepare_vlm


def _turns(question: str) -> list[dict]:
    return [{"from": "human", "value": f"<image>\n{question}"}, {"from": "gpt", "value": "An answer."}]


def test_prepare_edit_with_a_wrong_image_root_exits_non_zero_naming_image_root(tmp_path):
    (tmp_path / "images").mkdir()
    for name in ("a.png", "b.png"):
        Image.new("RGB", (32, 32), (10, 20, 30)).save(tmp_path / "images" / name)
    row = {"images": ["a.png", "b.png"], "instructions": [["make it red"]]}
    (tmp_path / "chains.jsonl").write_text(json.dumps(row) + "\n")
    args = ["edit", str(tmp_path / "chains.jsonl"), str(tmp_path / "out"), "--image-root", str(tmp_path / "wrong")]
    result = CliRunner().invoke(prepare_app, args)
    output = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "nothing was written" in output and "--image-root" in output
    fixed = CliRunner().invoke(prepare_app, [*args[:3], "--image-root", str(tmp_path / "images")])
    assert fixed.exit_code == 0, fixed.output


def test_prepare_vlm_drops_images_that_do_not_decode_unless_told_not_to_check(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(images / "good.jpg")
    (images / "broken.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")
    rows = [{"id": "good", "image": "good.jpg", "conversations": _turns("What?")},
            {"id": "bad", "image": "broken.jpg", "conversations": _turns("And this?")}]  # fmt: skip
    (tmp_path / "llava.json").write_text(json.dumps(rows))
    report = prepare_vlm(tmp_path / "llava.json", tmp_path / "out.jsonl", image_root=images)
    assert report.rows_written == 1
    assert report.dropped_by_reason == {"image_unreadable": ("llava.json[1]",)}
    fast = prepare_vlm(tmp_path / "llava.json", tmp_path / "fast.jsonl", image_root=images, decode_check=False)
    assert fast.rows_written == 2 and not fast.dropped
