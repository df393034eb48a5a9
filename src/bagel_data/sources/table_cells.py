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

import pyarrow as pa

from ..errors import ConfigError

# Tried in this order when no column is named: `datasets`' own names, then img2dataset's.
IMAGE_COLUMNS = ("image", "img", "jpg", "png", "webp")
CAPTION_COLUMNS = ("text", "caption", "captions", "txt", "prompt")


class CellError(ValueError):
    """One cell that cannot be used; the caller drops or skips its row."""


def _image_type_ok(kind: pa.DataType) -> bool:
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or _is_text(kind):
        return True
    return pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _caption_type_ok(kind: pa.DataType) -> bool:
    if _is_text(kind):
        return True
    return (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and _is_text(kind.value_type)


def _found(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name} ({field.type})" for field in schema) or "none"


def resolve_columns(
    schema: pa.Schema, image_column: str | None, caption_column: str | None, where: str
) -> tuple[str, str]:
    """The (image, caption) column names of a table with `schema`: the ones named, else the
    first of `IMAGE_COLUMNS` / `CAPTION_COLUMNS` present. A column missing or of a type that
    cannot hold images / captions is one `ConfigError` naming the columns found in `where`."""
    chosen = []
    for key, named, candidates, type_ok, holds in (
        ("image_column", image_column, IMAGE_COLUMNS, _image_type_ok, "binary, a {bytes, path} struct or a path"),
        ("caption_column", caption_column, CAPTION_COLUMNS, _caption_type_ok, "a string or a list of strings"),
    ):
        name = named or next((column for column in candidates if column in schema.names), None)
        if name is None or name not in schema.names:
            looked = repr(named) if named else f"any of {', '.join(candidates)}"
            raise ConfigError(
                key,
                named,
                f"{where} has no column {looked}; its columns: {_found(schema)}. Pass the right one as {key}",
            )
        kind = schema.field(name).type
        if not type_ok(kind):
            raise ConfigError(
                key, name, f"column {name!r} of {where} is {kind}, it must be {holds}; its columns: {_found(schema)}"
            )
        chosen.append(name)
    return chosen[0], chosen[1]


def image_cell(value: object) -> bytes | str:
    """The image of one cell: its encoded bytes, or the path to read them from."""
    if isinstance(value, dict):  # datasets.Image: bytes when embedded, else a path
        data, path = value.get("bytes"), value.get("path")
        if data:
            return bytes(data)
        value = path
    if isinstance(value, (bytes, bytearray)) and value:
        return bytes(value)
    if isinstance(value, str) and value:
        return value
    raise CellError("the image cell is empty (no bytes and no path)")


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
