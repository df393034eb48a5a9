"""Tests for the synthetic BAGEL-format dataset generator."""

from __future__ import annotations

import io
import json
import random
import re
import time
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

from bagel_data.formats import EDIT_SCHEMA, T2I_SCHEMA
from bagel_data.synthetic.dataset import (
    DemoPaths,
    DemoSizes,
    encode_image,
    photo_like_image,
    write_demo_dataset,
)

SIZES = DemoSizes.demo()
MODES = ("RGB", "RGBA", "L", "P", "CMYK")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoPaths:
    return write_demo_dataset(tmp_path_factory.mktemp("demo") / "data")


def _vlm_rows(paths: DemoPaths) -> list[dict]:
    return [json.loads(line) for line in paths.vlm_jsonl.read_text(encoding="utf-8").splitlines()]


def _images(row: dict) -> list[str]:
    image = row.get("image", [])
    return [image] if isinstance(image, str) else image


def _human_text(row: dict) -> str:
    return "\n".join(turn["value"] for turn in row["conversations"] if turn["from"] == "human")


def _content_files(paths: DemoPaths) -> dict[str, bytes]:
    # dataset_info.yaml and parquet_info.json hold absolute paths: compared with the root cut out.
    root = str(paths.root).encode()
    return {
        str(p.relative_to(paths.root)): p.read_bytes().replace(root, b"<root>")
        for p in sorted(paths.root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("mode", MODES)
def test_photo_like_image_modes(mode: str) -> None:
    img = photo_like_image(np.random.default_rng(1), 96, 64, mode)
    assert img.mode == mode and img.size == (96, 64)
    pixels = np.asarray(img.convert("RGB") if mode == "P" else img, dtype=np.float32)
    assert pixels.std() > 8.0
    if mode == "RGBA":
        alpha = pixels[..., 3]
        assert alpha.min() < 16 and alpha.max() == 255
    if mode == "P":
        assert "transparency" in img.info
        assert (
            "transparency"
            not in photo_like_image(np.random.default_rng(1), 32, 32, "P", palette_transparency=False).info
        )


def test_encode_image_round_trips() -> None:
    rgba = photo_like_image(np.random.default_rng(2), 40, 30, "RGBA")
    assert Image.open(io.BytesIO(encode_image(rgba))).mode == "RGB"  # JPEG flattens alpha
    assert Image.open(io.BytesIO(encode_image(rgba, "PNG"))).mode == "RGBA"
    cmyk = photo_like_image(np.random.default_rng(2), 40, 30, "CMYK")
    assert Image.open(io.BytesIO(encode_image(cmyk, "JPEG"))).mode == "CMYK"


def test_t2i_parquet(demo: DemoPaths) -> None:
    s = SIZES.t2i
    files = sorted(demo.t2i_dir.glob("*.parquet"))
    assert [f.name for f in files] == [f"part-{k:05d}.parquet" for k in range(s.files)]
    caption_counts = []
    for f in files:
        pf = pq.ParquetFile(f)
        assert pf.schema_arrow.equals(T2I_SCHEMA)
        assert pf.metadata.num_row_groups == s.row_groups
        assert all(pf.metadata.row_group(g).num_rows == s.rows_per_group for g in range(s.row_groups))
        for row in pf.read().to_pylist():
            captions = json.loads(row["captions"])
            assert all(isinstance(v, str) and v for v in captions.values())
            caption_counts.append(len(captions))
            img = Image.open(io.BytesIO(row["image"]))
            img.load()
            assert s.image.min_side <= min(img.size) and max(img.size) <= s.image.max_side
    assert min(caption_counts) >= s.per_row[0] and max(caption_counts) == s.per_row[1]


def test_edit_parquet_and_parquet_info(demo: DemoPaths) -> None:
    s = SIZES.edit
    info = json.loads(demo.parquet_info.read_text())
    files = sorted(demo.edit_dir.glob("*.parquet"))
    assert sorted(info) == [str(f) for f in files] and len(files) == s.files
    for f in files:
        meta = pq.read_metadata(f)
        assert info[str(f)] == {"num_row_groups": meta.num_row_groups, "num_rows": meta.num_rows}
        assert meta.num_row_groups == s.row_groups and meta.num_rows == s.row_groups * s.rows_per_group
        table = pq.read_table(f)
        assert table.schema.equals(EDIT_SCHEMA)
        for row in table.to_pylist():
            images, instructions = row["image_list"], row["instruction_list"]
            assert s.per_row[0] <= len(images) <= s.per_row[1]
            assert len(instructions) == len(images) - 1
            assert all(phrasings and all(isinstance(t, str) and t for t in phrasings) for phrasings in instructions)
            assert len({Image.open(io.BytesIO(b)).size for b in images}) == 1


def test_vlm_rows_reference_existing_media(demo: DemoPaths) -> None:
    rows = _vlm_rows(demo)
    assert len(rows) == SIZES.vlm.rows
    for row in rows:
        roles = [turn["from"] for turn in row["conversations"]]
        assert roles == ["human", "gpt"] * (len(roles) // 2) and roles
        human, images = _human_text(row), _images(row)
        assert human.count("<image>") == len(images)
        assert all((demo.vlm_image_dir / name).is_file() for name in images)
        if "video" in row:
            assert human.count("<video>") == 1 and not images
            target = demo.vlm_image_dir / row["video"]
            assert target.is_dir() if row["video"].endswith("/") else target.is_file()
        else:
            assert "<video>" not in human


def test_vlm_rows_cover_edge_cases(demo: DemoPaths) -> None:
    rows = _vlm_rows(demo)
    videos = [row.get("video") for row in rows]
    assert videos.count("clip_0.mp4") >= 2 and videos.count("clip_0/") >= 2
    assert any("image" not in row and "video" not in row for row in rows)  # text only
    assert any("<image><image>" in _human_text(row) for row in rows)
    assert any(re.search(r"\S <image> \S", _human_text(row)) for row in rows)  # mid-sentence
    assert any(isinstance(row.get("image"), str) for row in rows)
    assert any(isinstance(row.get("image"), list) and len(row["image"]) == 1 for row in rows)
    assert max(len(row["conversations"]) for row in rows) >= 6
    assert any(re.search(r"[\u4e00-\u9fff]", json.dumps(row, ensure_ascii=False)) for row in rows)


def test_vlm_image_modes(demo: DemoPaths) -> None:
    images = [Image.open(demo.vlm_image_dir / name) for row in _vlm_rows(demo) for name in _images(row)]
    assert set(MODES) <= {img.mode for img in images}
    assert any(img.mode == "P" and "transparency" in img.info for img in images)


def test_video_file_decodes(demo: DemoPaths) -> None:
    with av.open(str(demo.vlm_image_dir / "clip_0.mp4")) as container:
        assert container.streams.video[0].codec_context.name == "mpeg4"
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    assert len(frames) == SIZES.vlm.video_frames
    assert frames[0].shape == (SIZES.vlm.video_size[1], SIZES.vlm.video_size[0], 3)
    assert not np.array_equal(frames[0], frames[-1])  # the camera pans


def test_frame_folder_is_numbered(demo: DemoPaths) -> None:
    folder = demo.vlm_image_dir / "clip_0"
    numbers = sorted(int(re.fullmatch(r"frame_(\d+)\.jpg", p.name).group(1)) for p in folder.iterdir())
    assert numbers == list(range(1, len(numbers) + 1))
    assert SIZES.vlm.folder_frames[0] <= len(numbers) <= SIZES.vlm.folder_frames[1]
    assert Image.open(folder / "frame_1.jpg").size == SIZES.vlm.video_size


def test_dataset_info_and_grouped_datasets(demo: DemoPaths) -> None:
    info = yaml.safe_load(demo.dataset_info.read_text())
    groups = yaml.safe_load(demo.grouped_datasets.read_text())
    assert list(groups) == ["t2i_pretrain", "unified_edit", "vlm_sft"]
    for group, cfg in groups.items():
        assert len(cfg["num_used_data"]) == len(cfg["dataset_names"])
        assert cfg["is_mandatory"] == (group == "t2i_pretrain")
        for name in cfg["dataset_names"]:
            meta = info[group][name]
            assert Path(meta["data_dir"]).is_absolute() and Path(meta["data_dir"]).is_dir()
    t2i, edit, vlm = (info[g][groups[g]["dataset_names"][0]] for g in groups)
    assert (t2i["num_files"], t2i["num_total_samples"]) == (SIZES.t2i.files, SIZES.t2i.rows)
    assert Path(edit["parquet_info_path"]) == demo.parquet_info
    assert Path(vlm["jsonl_path"]) == demo.vlm_jsonl and vlm["num_total_samples"] == SIZES.vlm.rows
    assert groups["vlm_sft"]["num_used_data"] == [SIZES.vlm.rows]
    assert groups["unified_edit"]["vit_image_transform_args"] == {
        "image_stride": 14,
        "max_image_size": 378,
        "min_image_size": 224,
    }
    assert groups["vlm_sft"]["image_transform_args"]["max_pixels"] == 490 * 490
    assert groups["vlm_sft"]["frame_sampler_args"] == {"max_num_frames": 8, "min_num_frames": 4}
    assert [groups[g]["weight"] for g in groups] == [0.5, 0.3, 0.2]


def test_seed_determinism_marker_and_global_rngs(demo: DemoPaths, tmp_path: Path) -> None:
    py_state, np_state = random.getstate(), np.random.get_state()
    again = write_demo_dataset(tmp_path / "data")
    assert random.getstate() == py_state
    now = np.random.get_state()
    assert np.array_equal(now[1], np_state[1]) and now[2:] == np_state[2:]
    assert _content_files(again) == _content_files(demo)

    stamp = again.vlm_jsonl.stat().st_mtime_ns
    start = time.perf_counter()
    assert write_demo_dataset(tmp_path / "data") == again
    assert time.perf_counter() - start < 0.5 and again.vlm_jsonl.stat().st_mtime_ns == stamp

    marker = (again.root / ".complete").read_text()
    write_demo_dataset(tmp_path / "data", seed=1)
    assert (again.root / ".complete").read_text() != marker
    for part in ("t2i/part-00000.parquet", "edit/part-00000.parquet", "vlm/train.jsonl"):
        assert (again.root / part).read_bytes() != (demo.root / part).read_bytes()


def test_demo_parquet_info_is_keyed_as_bagels_reader_looks_it_up(demo):
    """BAGEL's edit listing joins dataset_info's data_dir with each file name and looks that
    exact string up in parquet_info: every demo shard must be found that way."""
    import os

    import yaml

    info = yaml.safe_load(demo.dataset_info.read_text())
    entry = next(iter(info["unified_edit"].values()))
    parquet_info = json.loads(demo.parquet_info.read_text())
    names = sorted(name for name in os.listdir(entry["data_dir"]) if name.endswith(".parquet"))
    assert names
    assert sorted(parquet_info) == [os.path.join(entry["data_dir"], name) for name in names]
