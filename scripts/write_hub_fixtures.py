"""Write the small datasets of tests/data/hub/ with the tools users write them with.

Run once, from the repository root, where `datasets` and `webdataset` are importable:

    python scripts/write_hub_fixtures.py tests/data/hub

Written with datasets 5.2.0 and webdataset 1.0.2 (the versions are recorded in
tests/data/hub/VERSIONS). The tests read the committed files; they do not need either package.

- `save_to_disk/`: `Dataset.save_to_disk` of an (image, text) table: Arrow IPC stream files,
  `state.json`, `dataset_info.json`.
- `image_text.parquet`: `Dataset.to_parquet` of the same table, as the Hub serves it.
- `two_captions.parquet`: `Dataset.to_parquet` of an image and two caption columns.
- `magicbrush.parquet`: MagicBrush's columns, two turns of one edit and a one-turn edit.
- `unnamed.parquet`: a table whose columns have none of the usual names (`picture`, `words`).
- `urls.parquet`: an img2dataset input: image URLs and captions, no image bytes.
- `classes_png.tar`, `classes_jpg.tar`: `webdataset.TarWriter` shards of image + `.cls`.
"""

from __future__ import annotations

import io
import json
import sys
from importlib import metadata
from pathlib import Path

from PIL import Image

COLOURS = [(200, 30, 30), (30, 160, 40), (40, 60, 210), (220, 200, 40)]
CLASSES = ["tench", "goldfish", "great white shark", "tiger shark"]


def _image(i: int, size=(16, 12)) -> Image.Image:
    return Image.new("RGB", size, COLOURS[i % len(COLOURS)])


def _encoded(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def write_tables(out: Path) -> None:
    import datasets

    images = [_image(i) for i in range(4)]
    features = datasets.Features({"image": datasets.Image(), "text": datasets.Value("string")})
    texts = [f"a {name} on a plain background" for name in CLASSES]
    datasets.Dataset.from_dict({"image": images, "text": texts}, features=features).save_to_disk(
        str(out / "save_to_disk")
    )
    datasets.Dataset.from_dict({"image": images, "text": texts}, features=features).to_parquet(
        str(out / "image_text.parquet")
    )
    two = datasets.Features(
        {"image": datasets.Image(), "short": datasets.Value("string"), "long": datasets.Value("string")}
    )
    datasets.Dataset.from_dict({"image": images, "short": CLASSES, "long": texts}, features=two).to_parquet(
        str(out / "two_captions.parquet")
    )
    odd = datasets.Features({"picture": datasets.Image(), "words": datasets.Value("string")})
    datasets.Dataset.from_dict({"picture": images, "words": texts}, features=odd).to_parquet(
        str(out / "unnamed.parquet")
    )
    edits = datasets.Features({
        "img_id": datasets.Value("string"), "turn_index": datasets.Value("int32"), "source_img": datasets.Image(),
        "mask_img": datasets.Image(), "instruction": datasets.Value("string"), "target_img": datasets.Image(),
    })  # fmt: skip
    datasets.Dataset.from_dict(
        {"img_id": ["1", "1", "2"], "turn_index": [1, 2, 1], "source_img": [images[0], images[1], images[2]],
         "mask_img": images[:3], "instruction": ["make it green", "make it blue", "make it yellow"],
         "target_img": [images[1], images[2], images[3]]},
        features=edits,
    ).to_parquet(str(out / "magicbrush.parquet"))  # fmt: skip
    urls = [f"https://example.com/images/{i:05d}.jpg" for i in range(4)]
    datasets.Dataset.from_dict({"url": urls, "caption": texts}).to_parquet(str(out / "urls.parquet"))


def write_tars(out: Path) -> None:
    import webdataset

    for fmt, ext in (("PNG", "png"), ("JPEG", "jpg")):
        with webdataset.TarWriter(str(out / f"classes_{ext}.tar")) as sink:
            for i in range(4):
                sink.write({"__key__": f"{i:06d}", ext: _encoded(_image(i), fmt), "cls": i})


def main(out: str) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    write_tables(folder)
    write_tars(folder)
    (folder / "class_names.txt").write_text("\n".join(CLASSES) + "\n")
    versions = {name: metadata.version(name) for name in ("datasets", "webdataset")}
    (folder / "VERSIONS").write_text(json.dumps(versions, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/hub")
