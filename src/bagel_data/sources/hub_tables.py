"""Recognising the tables users bring from the Hugging Face Hub and img2dataset, so that a
table the readers cannot use is named for what it is, with the exact fix.

- `Dataset.save_to_disk` folders: `state.json`, `dataset_info.json` and Arrow IPC stream
  files (`data-00000-of-00001.arrow`), which pyarrow reads; `arrow_files` lists them,
  `read_arrow` reads one (its record batches play the part of parquet row groups).
- Image URLs (img2dataset's input, LAION's metadata): a text column whose cells are
  `http(s)://` addresses, not images; `urls_error` gives the img2dataset command that
  downloads them into tars the readers take.
- A table without BAGEL's T2I columns (`image` bytes, `captions` JSON): `column_fix` names
  the columns to give as `image_column` / `caption_column`.

Every message names its fix through `Words`: the config keys, or the CLI's options.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError

ARROW = ".arrow"
URL_PREFIXES = ("http://", "https://")
URL_SAMPLE = 16  # cells looked at to call a column one of URLs


@dataclasses.dataclass(frozen=True)
class Words:
    """How the interface in use names the two column settings."""

    image: str = "image_column"
    caption: str = "caption_column"
    several: str = "several are given as a list, caption_column: [a, b]"

    def give(self, key: str, value: str) -> str:
        return f"`{key}: {value}`" if key.endswith("_column") else f"`{key} {value}`"


CONFIG_WORDS = Words()
CLI_WORDS = Words("--image-column", "--caption-column", "repeat --caption-column to read several")


def is_save_to_disk(folder: str | os.PathLike) -> bool:
    """Whether `folder` is a `datasets` `save_to_disk` folder (a split, or a DatasetDict's)."""
    path = Path(folder)
    if not path.is_dir():
        return False
    if (path / "state.json").is_file() and any(path.glob(f"*{ARROW}")):
        return True
    return (path / "dataset_dict.json").is_file()


def save_to_disk_fix(folder: str | os.PathLike) -> str:
    """What to do with a `save_to_disk` folder given where parquet shards are read."""
    return (
        "is a `datasets` save_to_disk folder (Arrow IPC stream files, state.json, dataset_info.json), not "
        f"parquet shards. Prepare it: `bagel-data prepare t2i {folder} OUT_DIR` (its image and text columns are "
        "found, or name them with --image-column / --caption-column) and give OUT_DIR as data_dir; or write "
        f"parquet with `datasets.load_from_disk({str(folder)!r}).to_parquet('OUT_DIR/part-00000.parquet')` and read "
        "that in place with image_column / caption_column"
    )


def arrow_files(folder: str | os.PathLike) -> list[Path]:
    """The Arrow files of a `save_to_disk` folder, in order (each split's, for a DatasetDict)."""
    return sorted(path for path in Path(folder).rglob(f"*{ARROW}") if path.is_file())


def read_arrow(file: str | os.PathLike) -> pa.Table:
    """An Arrow IPC file as `save_to_disk` writes it (the stream format; the file format too)."""
    try:
        with pa.ipc.open_stream(pa.memory_map(str(file))) as reader:
            return reader.read_all()
    except pa.ArrowInvalid:
        with pa.ipc.open_file(pa.memory_map(str(file))) as file_reader:
            return file_reader.read_all()


def first_texts(file: str | os.PathLike, column: str) -> list[str]:
    """Up to `URL_SAMPLE` text cells of `column` from the start of a parquet or Arrow file."""
    if str(file).endswith(ARROW):
        values = read_arrow(file).column(column).slice(0, URL_SAMPLE).to_pylist()
    else:
        handle = pq.ParquetFile(str(file))
        if handle.num_row_groups == 0:
            return []
        values = handle.read_row_group(0, columns=[column]).column(column).slice(0, URL_SAMPLE).to_pylist()
    return [value for value in values if isinstance(value, str) and value.strip()]


def url_column(file: str | os.PathLike, schema: pa.Schema) -> tuple[str, str] | None:
    """`(column, first cell)` of the first text column whose cells are all web addresses."""
    for field in schema:
        if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
            continue
        texts = first_texts(file, field.name)
        if texts and all(text.strip().lower().startswith(URL_PREFIXES) for text in texts):
            return field.name, texts[0]
    return None


def _text_columns(schema: pa.Schema, but: str) -> list[str]:
    kinds = (pa.types.is_string, pa.types.is_large_string)
    return [field.name for field in schema if field.name != but and any(kind(field.type) for kind in kinds)]


def urls_error(key: str, file: str | os.PathLike, schema: pa.Schema, found: tuple[str, str]) -> ConfigError:
    """The column holds image addresses: how img2dataset turns them into tars read in place."""
    column, example = found
    captions = _text_columns(schema, column)
    caption = f" --caption_col {captions[0]}" if captions else ""
    fmt = "parquet" if str(file).endswith(".parquet") else "arrow"
    command = (
        f"img2dataset --url_list {file} --input_format {fmt} --url_col {column}{caption} "
        "--output_format webdataset --output_folder images"
    )
    return ConfigError(
        key,
        column,
        f"column {column!r} of {file} holds image URLs ({example[:100]}), not images. Download them first "
        f"(pip install img2dataset): `{command}`; then the .tar shards in images/ are read in place "
        "(a T2I data_dir) or prepared with `bagel-data prepare t2i images OUT_DIR`",
    )


def _image_like(kind: pa.DataType) -> bool:
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return True
    return pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0


def column_fix(schema: pa.Schema, words: Words = CONFIG_WORDS) -> str:
    """The settings that name a table's image and caption columns, guessed from its types."""
    image = next((field.name for field in schema if _image_like(field.type)), None)
    texts = _text_columns(schema, image or "")
    parts = [words.give(words.image, image or "<the image column>")]
    parts.append(words.give(words.caption, texts[0] if len(texts) == 1 else "<the caption column>"))
    if len(texts) > 1:
        parts.append(f"(its text columns: {', '.join(texts)}; {words.several})")
    return " and ".join(parts[:2]) + (f" {parts[2]}" if len(parts) > 2 else "")


def in_cli_words(error: ConfigError) -> ConfigError:
    """`error` as the command line says it: its options for the two column keys."""
    message = str(error)
    for key, option in (("image_column", "--image-column"), ("caption_column", "--caption-column")):
        message = message.replace(f"`{key}: ", f"`{option} ").replace(f"{key} = None:", f"{key} not given:")
        message = message.replace(key, option)
    message = message.replace(CONFIG_WORDS.several, CLI_WORDS.several.replace("image_column", "--image-column"))
    return ConfigError(message)
