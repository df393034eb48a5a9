"""The on-disk parquet schemas, defined once.

Every reader checks its columns against these, and every writer (the `prepare` tools,
the synthetic data set, the test builders) writes them. See docs/formats/t2i.md and
docs/formats/edit.md for what each column holds.
"""

from __future__ import annotations

import pyarrow as pa

# Text-to-image: one image (encoded bytes) and a JSON object of caption strings per row.
T2I_SCHEMA = pa.schema([("image", pa.binary()), ("captions", pa.string())])
T2I_COLUMNS: tuple[str, ...] = tuple(T2I_SCHEMA.names)

# Image editing: a list of images (encoded bytes) and, per step, a list of instructions.
EDIT_SCHEMA = pa.schema([("image_list", pa.list_(pa.binary())), ("instruction_list", pa.list_(pa.list_(pa.string())))])
EDIT_COLUMNS: tuple[str, ...] = tuple(EDIT_SCHEMA.names)


def column_types(schema: pa.Schema) -> dict[str, pa.DataType]:
    """The schema as a `{column name: arrow type}` mapping."""
    return {field.name: field.type for field in schema}
