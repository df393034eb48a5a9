"""Captions beside an image: the `.txt` / `.json` sidecars of an image folder or of a
WebDataset tar's sample, and the numbered JSON captions BAGEL's T2I shards store.

`prepare t2i` and the in-place tar reader (`families/t2i_tars.py`) both read captions here,
so a sample that prepares is a sample that reads, with the same captions in the same order.
A row these rules cannot use raises `RowDropped` with its `SkipReason`.
"""

from __future__ import annotations

import json
import re

from ..errors import RowDropped, SkipReason

CAPTION_COLUMN = re.compile(r"caption_(\d+)$")
# The keys of a sidecar `.json` object that hold captions, in the order they are tried; the
# first one holding text is used and every other key is ignored: img2dataset's `.json` also
# holds `url`, `status`, `width`..., and a user's may hold tags or labels that are not
# captions. `caption` takes its numbered siblings `caption_1`, `caption_2`, ... with it.
CAPTION_KEYS = ("caption", "captions", "text", "prompt", "alt_text", "description")


def caption_values(value: object) -> list[str]:
    """Captions from a sidecar/manifest value: a string, a list of strings or an object of them."""
    values = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else [value]
    texts = [text for text in values if isinstance(text, str)]
    if len(texts) != len(values):
        raise RowDropped(SkipReason.CAPTION_INVALID, "captions must be strings")
    return [text.strip() for text in texts if text.strip()]


def numbered_caption_keys(row: dict) -> list[tuple[int, str]]:
    """`(N, "caption_N")` for every `caption_N` key of `row`, by number."""
    return sorted((int(m.group(1)), key) for key in row if (m := CAPTION_COLUMN.match(str(key))))


def json_captions(meta: object) -> tuple[list[str], str]:
    """Captions from a parsed sidecar `.json`, and the key they came from (`CAPTION_KEYS`).

    A list or a string is captions as a whole; an object gives only its first caption key
    that holds text. A caption key holding something other than text is an error.
    """
    if not isinstance(meta, dict):
        return caption_values(meta), "list" if isinstance(meta, list) else "string"
    for key in CAPTION_KEYS:
        values = [meta.get(key)]
        if key == "caption":
            values += [meta[name] for _, name in numbered_caption_keys(meta)]
        try:
            texts = [text for value in values if value is not None for text in caption_values(value)]
        except RowDropped:
            raise RowDropped(SkipReason.CAPTION_INVALID, f"the .json's {key!r} is not text") from None
        if texts:
            return texts, key
    return [], ""


def sidecar_captions(txt: str | None, js: str | None) -> tuple[list[str], str]:
    """An image's captions from the text of its `.txt` (one per non-empty line) and `.json`
    sidecars (`json_captions`), and where they came from, e.g. `.txt + .json caption`.

    The folder and the tar layouts both read their captions here. A `.json` object without a
    caption key, and no `.txt` text, drops the row as `no_caption`, naming the keys it has.
    """
    captions: list[str] = []
    sources: list[str] = []
    if txt is not None:
        lines = [line.strip() for line in txt.splitlines() if line.strip()]
        if lines:
            captions += lines
            sources.append(".txt")
    if js is not None:
        try:
            meta = json.loads(js)
        except ValueError as exc:
            raise RowDropped(SkipReason.CAPTION_INVALID, f"the .json is not JSON: {exc}") from None
        texts, key = json_captions(meta)
        if texts:
            captions += texts
            sources.append(f".json {key}")
        elif not captions and isinstance(meta, dict):
            keys = ", ".join(sorted(map(str, meta))[:8]) or "none"
            raise RowDropped(
                SkipReason.NO_CAPTION, f"the .json has no caption key ({', '.join(CAPTION_KEYS)}); its keys: {keys}"
            )
    return captions, " + ".join(sources)


def numbered_captions(captions: list[str]) -> str:
    """BAGEL's captions cell: `{"caption_1": ..., ...}`, repeated texts once, in order."""
    if not captions:
        raise RowDropped(SkipReason.NO_CAPTION, "no caption text found for this image")
    numbered = {f"caption_{i}": text for i, text in enumerate(dict.fromkeys(captions), 1)}
    return json.dumps(numbered, ensure_ascii=False)
