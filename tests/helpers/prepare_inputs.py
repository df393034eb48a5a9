"""Generated raw inputs for the four prepare tools, each with good rows and named bad ones."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np

from bagel_data.synthetic.dataset import encode_image, photo_like_image


def image_bytes(seed: int, fmt: str = "JPEG", size: tuple[int, int] = (40, 28)) -> bytes:
    return encode_image(photo_like_image(np.random.default_rng(seed), *size), fmt)


def t2i_folder(root: Path, count: int, bad: bool = True) -> Path:
    """`count` images with `.txt` captions; with `bad`, every 7th has no caption and every
    11th is not an image, plus one orphan caption file."""
    root.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        image = root / f"img{index:04d}.jpg"
        broken = bad and index % 11 == 5
        image.write_bytes(b"not an image" if broken else image_bytes(index))
        if not (bad and index % 7 == 3):
            (root / f"img{index:04d}.txt").write_text(f"caption of {index}\nsecond line {index}\n")
    if bad:
        (root / "orphan.txt").write_text("no image has this name")
    return root


def t2i_tar(path: Path, count: int, folder: str = "k") -> Path:
    """A WebDataset shard: key `FOLDER/NNNN` with `.jpg` and `.txt` (even keys) or
    img2dataset-style `.json` (odd keys: the caption among numbers, nulls and other strings);
    key 3 has no caption, key 4 an image that is not one, and one key only a caption."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as archive:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))

        for index in range(count):
            key = f"{folder}/{index:04d}"
            add(f"{key}.jpg", b"broken" if index == 4 else image_bytes(index))
            if index == 3:
                continue
            if index % 2 == 0:
                add(f"{key}.txt", f"caption of {index}".encode())
            else:
                meta = {"url": "http://x", "key": key, "caption": f"caption of {index}", "width": 40,
                        "status": "success", "error_message": None, "exif": None, "sha256": "ab12"}  # fmt: skip
                add(f"{key}.json", json.dumps(meta).encode())
        add(f"{folder}/lonely.txt", b"no image")
    return path


def img2dataset_files(tar: Path, root: Path) -> Path:
    """The members of `tar` unpacked as img2dataset's "files" output: the shard's folder, with
    the `NNNNN_stats.json` and `NNNNN.parquet` img2dataset writes beside it."""
    with tarfile.open(tar) as archive:
        for member in archive:
            data = archive.extractfile(member)
            assert data is not None
            (root / member.name).parent.mkdir(parents=True, exist_ok=True)
            (root / member.name).write_bytes(data.read())
    shard = tar.name.removesuffix(".tar")
    (root / f"{shard}_stats.json").write_text(json.dumps({"count": 9, "successes": 8, "status_dict": {}}))
    (root / f"{shard}.parquet").write_bytes(b"PAR1 stands in for img2dataset's listing")
    return root


def edit_manifest(root: Path, count: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for index in range(count + 1):
        (root / f"e{index}.png").write_bytes(image_bytes(index, "PNG"))
    lines = []
    for index in range(count):
        row = {"images": [f"e{index}.png", f"e{index + 1}.png"], "instructions": [[f"step {index}"]]}
        if index % 5 == 2:
            row["images"] = [f"e{index}.png", "missing.png"]
        lines.append(json.dumps(row))
    lines.insert(3, "{not json")
    (root / "edits.jsonl").write_text("\n".join(lines) + "\n")
    return root / "edits.jsonl"


def vlm_source(root: Path, count: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "a.jpg").write_bytes(image_bytes(0))
    rows = []
    for index in range(count):
        human = {"from": "user" if index % 3 == 0 else "human", "value": f"question {index}"}
        gpt = {"from": "gpt", "value": f"answer {index}" if index % 4 != 1 else " "}
        rows.append({"id": index, "image": "a.jpg" if index % 2 else "gone.jpg", "conversations": [human, gpt]})
    (root / "llava.json").write_text(json.dumps(rows))
    return root / "llava.json"


def interleaved_docs(root: Path, count: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "p.jpg").write_bytes(image_bytes(1))
    lines = []
    for index in range(count):
        doc = {"texts": [f"doc {index}", None], "images": [None, "p.jpg" if index % 4 else "gone.jpg"]}
        lines.append(json.dumps(doc))
    (root / "docs.jsonl").write_text("\n".join(lines) + "\n")
    return root / "docs.jsonl"


def hf_t2i_parquet(path: Path, captions: list, image_column: str = "image", caption_column: str = "text") -> Path:
    """A T2I table as the Hugging Face `datasets` library writes it (`Dataset.to_parquet`):
    images in a `datasets.Image` column (`{bytes, path}` structs), one per caption cell."""
    import datasets  # the dev extra

    images = [image_bytes(index, "PNG") for index in range(len(captions))]
    features = datasets.Features({image_column: datasets.Image(), caption_column: datasets.Value("string")})
    cells = {image_column: [{"bytes": data, "path": None} for data in images], caption_column: captions}
    datasets.Dataset.from_dict(cells, features=features).to_parquet(str(path))
    return path


def hf_edit_parquet(path: Path, instructions: list[str]) -> Path:
    """Edit triples as `datasets` writes them: `input_image` / `edited_image` Image columns
    and an `edit_prompt` text, InstructPix2Pix's names; source `i`'s seed is `i`, target's `i + 100`."""
    import datasets  # the dev extra

    count = len(instructions)
    features = datasets.Features(
        {"input_image": datasets.Image(), "edit_prompt": datasets.Value("string"), "edited_image": datasets.Image()}
    )
    cells = {
        "input_image": [{"bytes": image_bytes(i, "PNG"), "path": None} for i in range(count)],
        "edit_prompt": instructions,
        "edited_image": [{"bytes": image_bytes(i + 100, "PNG"), "path": None} for i in range(count)],
    }
    datasets.Dataset.from_dict(cells, features=features).to_parquet(str(path))
    return path
