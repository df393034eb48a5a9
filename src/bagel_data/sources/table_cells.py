"""Reading image/caption tables as users publish them (Hugging Face `datasets` parquet,
img2dataset parquet, BAGEL's own T2I shards): which columns hold the image and the captions,
and what one cell of each means.

An image cell is encoded bytes, a `{bytes, path}` struct as `datasets.Image` writes it, or a
path (relative to an image root). A caption cell is a string, a list of strings, or BAGEL's
JSON captions (`{"caption_1": ..., ...}`). Both `prepare t2i` and the readers use these rules,
so a table that prepares is a table that reads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError
from .hub_tables import ARROW, CONFIG_WORDS, Words, column_fix, read_arrow, url_column, urls_error

# Tried in this order when no column is named: `datasets`' own names, then img2dataset's.
IMAGE_COLUMNS = ("image", "img", "jpg", "png", "webp")
CAPTION_COLUMNS = ("text", "caption", "captions", "txt", "prompt")


class CellError(ValueError):
    """One cell that cannot be used; the caller drops or skips its row."""


def _image_type_ok(kind: pa.DataType) -> bool:
    """Binary, a path, or a `{bytes, path}` struct whose `bytes` is binary and `path` text
    (a struct of other field types would fail on every row: refused at the start)."""
    if _is_binary(kind) or _is_text(kind):
        return True
    if not pa.types.is_struct(kind) or kind.get_field_index("bytes") < 0:
        return False
    fields = {kind.field(i).name: kind.field(i).type for i in range(kind.num_fields)}
    return (_is_binary(fields["bytes"]) or pa.types.is_null(fields["bytes"])) and (
        "path" not in fields or _is_text(fields["path"]) or pa.types.is_null(fields["path"])
    )


def _is_binary(kind: pa.DataType) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind)


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _caption_type_ok(kind: pa.DataType) -> bool:
    if _is_text(kind):
        return True
    return (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and _is_text(kind.value_type)


_IMAGE_TYPES = "binary, a {bytes: binary, path: string} struct or a path (string)"


def _found(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name} ({field.type})" for field in schema) or "none"


def resolve_columns(
    schema: pa.Schema,
    image_column: str | None,
    caption_column: str | Sequence[str] | None,
    where: str,
    words: Words = CONFIG_WORDS,
) -> tuple[str, ...]:
    """The (image, caption, ...) column names of a table with `schema`: the ones named (one
    caption column or several), else the first of `IMAGE_COLUMNS` / `CAPTION_COLUMNS`
    present. A column missing or of a type that cannot hold images / captions is one
    `ConfigError` naming the columns found in `where` and the settings that fix it; a column
    of image URLs is named as such, with the command that downloads them."""
    captions = [caption_column] if caption_column is None or isinstance(caption_column, str) else list(caption_column)
    chosen = []
    wanted = [("image_column", image_column, IMAGE_COLUMNS, _image_type_ok, _IMAGE_TYPES)]
    wanted += [("caption_column", named, CAPTION_COLUMNS, _caption_type_ok, "a string or a list of strings")
               for named in captions]  # fmt: skip
    for key, named, candidates, type_ok, holds in wanted:
        name = named or next((column for column in candidates if column in schema.names), None)
        if name is None or name not in schema.names:
            found = url_column(where, schema) if key == "image_column" and os.path.isfile(where) else None
            if found is not None:
                raise urls_error(key, where, schema, found)
            looked = repr(named) if named else f"any of {', '.join(candidates)}"
            raise ConfigError(
                key,
                named,
                f"{where} has no column {looked}; its columns: {_found(schema)}. Name them: {column_fix(schema, words)}",
            )
        kind = schema.field(name).type
        if not type_ok(kind):
            raise ConfigError(
                key, name, f"column {name!r} of {where} is {kind}, it must be {holds}; its columns: {_found(schema)}"
            )
        if key == "image_column" and _is_text(kind) and os.path.isfile(where):
            found = url_column(where, pa.schema([schema.field(name)]))
            if found is not None:
                raise urls_error(key, where, schema, found)
        chosen.append(name)
    return tuple(chosen)


def read_table_schema(path: str) -> pa.Schema:
    """A parquet file's schema from its footer, or an Arrow file's (`save_to_disk`)."""
    if path.endswith(ARROW):
        return read_arrow(path).schema
    return pq.read_schema(path)


def local_table_columns(
    paths: list[str], image_column: str | None, caption_column: str | Sequence[str] | None
) -> tuple[str, ...]:
    """The (image, caption, ...) columns a group reads its table files by: checked against
    the first file's footer when it is local (a mistake named at construction), else the
    names given (or `image` / `text`), checked when a worker opens the file."""
    first = next((path for path in paths if os.path.isfile(path)), None)
    if first is None:
        named = [caption_column] if caption_column is None or isinstance(caption_column, str) else caption_column
        return (image_column or IMAGE_COLUMNS[0], *(name or CAPTION_COLUMNS[0] for name in named))
    try:
        schema = read_table_schema(first)
    except (OSError, pa.ArrowException) as exc:
        raise ConfigError("data_dir", first, f"not a readable parquet file: {exc}") from None
    return resolve_columns(schema, image_column, caption_column, first)


def check_bagel_columns(paths: list[str], columns: Sequence[str]) -> None:
    """A group that names no columns reads BAGEL's (`columns`): the first local file must
    have them, else one ConfigError says what the table is (image URLs; a table with other
    column names) and the group keys that read it."""
    first = next((path for path in paths if os.path.isfile(path)), None)
    if first is None:
        return
    try:
        schema = read_table_schema(first)
    except (OSError, pa.ArrowException):
        return  # the reader counts an unreadable file as a skip, naming the error
    if all(name in schema.names for name in columns):
        return
    found = url_column(first, schema)
    if found is not None:
        raise urls_error("image_column", first, schema, found)
    key = "image_column" if columns[0] not in schema.names else "caption_column"
    raise ConfigError(
        key,
        None,
        f"{first} lacks BAGEL's T2I columns ({', '.join(columns)}: image bytes and JSON captions); its columns: "
        f"{_found(schema)}. Read it in place by naming them in the group: {column_fix(schema)}",
    )


def image_cell(value: object) -> bytes | str:
    """The image of one cell: its encoded bytes, or the path to read them from. A cell of
    another type (a struct's `bytes` holding text, a number) is a `CellError`, never a
    `bytes(...)` call on it: `bytes(2**40)` would allocate a terabyte of zeros."""
    if isinstance(value, dict):  # datasets.Image: bytes when embedded, else a path
        data, path = value.get("bytes"), value.get("path")
        if data is not None and not isinstance(data, (bytes, bytearray)):
            raise CellError(f"the image struct's bytes field holds {type(data).__name__}, not bytes")
        if data:
            return bytes(data)
        value = path
    if isinstance(value, (bytes, bytearray)) and value:
        return bytes(value)
    if isinstance(value, str) and value:
        return value
    if value is None or isinstance(value, (str, bytes, bytearray)):
        raise CellError("the image cell is empty (no bytes and no path)")
    raise CellError(f"the image cell holds {type(value).__name__}, not bytes or a path")


def caption_cells(values: Sequence[object]) -> list[str]:
    """The captions of several caption columns' cells of one row, in column order."""
    return [text for value in values for text in caption_cell(value)]


def caption_cell(value: object) -> list[str]:
    """The captions of one cell, stripped, empty ones left out. A string that is a JSON
    object of strings (BAGEL's captions) gives its values; any other string is one caption."""
    if value is None:
        return []
    if isinstance(value, str):
        texts = _json_captions(value) if value.lstrip().startswith("{") else None
        values: list[object] = texts if texts is not None else [value]
    elif isinstance(value, list):
        values = value
    else:
        raise CellError(f"a caption cell must be text or a list of texts, not {type(value).__name__}")
    if not all(isinstance(text, str) for text in values if text is not None):
        raise CellError("a caption list must hold only texts")
    return [text.strip() for text in values if isinstance(text, str) and text.strip()]


def _json_captions(text: str) -> list[object] | None:
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return list(parsed.values()) if isinstance(parsed, dict) else None
