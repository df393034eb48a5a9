"""LLaVA-style `.json` files (one JSON array of conversation rows) read in place as JSONL.

LLaVA, ShareGPT-4V and most SFT sets on the Hub ship their rows as one JSON array
(`llava_v1_5_mix665k.json`), where BAGEL reads JSONL. Such a file, given as a `jsonl_path`,
is written once per node as a JSONL copy (one element a line, in order) into the node's
cache (`node_cache`: the JSONL index's root, or the temporary folder where that is off),
keyed by the file's path, size and modification time; the JSONL index reads the copy, and
row locations name the original file and the element (`element 0` is the array's first).
Only one element is held in memory at a time besides the file's text.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from ..errors import ConfigError
from . import node_cache

ELEMENT = "element"  # how a location names a row of an array (0-based, as the list index)


def is_json_array(path: str) -> bool:
    """Whether `path` is a local `.json` file whose first non-blank character opens a JSON
    array (a `.jsonl` file is read as JSONL whatever its first line holds)."""
    if not path.lower().endswith(".json") or not os.path.isfile(path):
        return False
    with open(path, "rb") as handle:
        head = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head[:1] == b"["


def _folder() -> Path:
    root = node_cache.cache_root()
    if root is not None and node_cache.root_trouble(root) is None:
        return Path(root)
    return Path(tempfile.gettempdir()) / f"bagel-data-json-{os.getuid() if hasattr(os, 'getuid') else 0}"


def jsonl_copy(path: str) -> str:
    """The JSONL copy of the JSON array at `path` (written now unless an up-to-date one exists)."""
    stat = os.stat(path)
    key = hashlib.sha256(f"{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:24]
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{Path(path).stem}.{key}.jsonl"
    if target.is_file():
        return str(target)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        with open(partial, "w", encoding="utf-8") as out:
            for element in _elements(path):
                out.write(json.dumps(element, ensure_ascii=False) + "\n")
        os.replace(partial, target)  # whole or not at all; a concurrent writer writes the same bytes
    finally:
        partial.unlink(missing_ok=True)
    return str(target)


def _elements(path: str):
    """The array's elements in order, decoded one at a time from the file's text."""
    text = Path(path).read_text(encoding="utf-8-sig")
    decoder = json.JSONDecoder()
    at = text.index("[") + 1
    count = 0
    while True:
        at = _skip_blank(text, at)
        if at >= len(text):
            raise ConfigError("jsonl_path", path, f"the JSON array is not closed (after {count} elements)")
        if text[at] == "]":
            return
        if count:
            if text[at] != ",":
                raise ConfigError("jsonl_path", path, f"not a JSON array: no ',' after element {count - 1}")
            at = _skip_blank(text, at + 1)
        try:
            element, at = decoder.raw_decode(text, at)
        except (ValueError, RecursionError) as exc:  # RecursionError: a nesting-depth bomb
            raise ConfigError("jsonl_path", path, f"element {count} is not valid JSON: {exc}") from None
        yield element
        count += 1


def _skip_blank(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at
