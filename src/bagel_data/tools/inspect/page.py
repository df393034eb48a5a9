"""`bagel-data inspect --html`: the first packs of a run as one self-contained HTML page.

Every picture is inline (a PNG data URI) and there is no script, stylesheet or font from
elsewhere, so the page opens offline, from an e-mail or a CI artifact. Per sample: its
images as thumbnails beside its texts, where it came from (file and row, or tar member),
and its token kinds with the loss mask as a strip. Then the mixture against its targets
and the skipped rows with their reasons. Drawn with Pillow alone (no matplotlib).
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from .pieces import Piece
from .plots import KIND_STYLE, UNKNOWN_KIND, PositionKind, strip_columns

THUMBNAIL_SIDE = 160  # pixels of a thumbnail's longer side
STRIP_WIDTH = 600  # pixels of a sample's strip (one column per position when shorter)


@dataclasses.dataclass(frozen=True)
class SampleView:
    group: str
    position: object
    worker: int
    span: tuple[int, int]
    location: str | None
    pieces: Sequence[Piece]
    kinds: np.ndarray  # one `PositionKind` per position of the sample
    loss: np.ndarray  # one bool per position: carries a loss


@dataclasses.dataclass(frozen=True)
class PackView:
    index: int
    tokens: int
    fill: float
    samples: Sequence[SampleView]


@dataclasses.dataclass(frozen=True)
class Share:
    """One group's part of the inspected packs against the share its weight asks for."""

    group: str
    target: float
    samples: float
    tokens: float


def data_uri(pixels: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def thumbnail(pixels: np.ndarray) -> np.ndarray:
    """`pixels` scaled so that the longer side is at most `THUMBNAIL_SIDE` (never enlarged)."""
    image = Image.fromarray(pixels)
    image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE), Image.Resampling.BILINEAR)
    return np.asarray(image)


def strip_pixels(kinds: np.ndarray, loss: np.ndarray, width: int = STRIP_WIDTH) -> np.ndarray:
    """Two bands: the positions' kinds in their legend colours (majority per column), and
    under them the loss mask (dark where a position carries a loss)."""
    columns = strip_columns(kinds, width)
    palette = np.array([(255, 255, 255)] + [_rgb(KIND_STYLE[kind][1]) for kind in PositionKind], dtype=np.uint8)
    top = palette[columns.astype(np.int64) - UNKNOWN_KIND]
    column_of = np.arange(len(loss)) * len(columns) // max(len(loss), 1)
    share = np.bincount(column_of, weights=loss, minlength=len(columns)) / np.maximum(
        np.bincount(column_of, minlength=len(columns)), 1
    )
    bottom = np.where(share[:, None] >= 0.5, (40, 40, 40), (225, 225, 225)).astype(np.uint8)
    return np.concatenate([np.repeat(top[None], 14, axis=0), np.repeat(bottom[None], 5, axis=0)])


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
td, th { border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; text-align: left; }
.sample { border-top: 1px solid #bbb; padding: 8px 0; display: flex; gap: 16px; }
.images { flex: 0 0 520px; display: flex; flex-wrap: wrap; gap: 4px; align-items: flex-start; }
.images figure { margin: 0; font-size: 11px; max-width: 164px; }
.texts { flex: 1; font-size: 13px; }
.texts pre { white-space: pre-wrap; margin: 2px 0 6px 0; font-family: inherit; }
.meta { color: #555; font-size: 12px; }
.strip { image-rendering: pixelated; width: 600px; height: 19px; border: 1px solid #999; }
.legend span { display: inline-block; margin-right: 12px; font-size: 12px; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: middle; }
"""


def _legend() -> str:
    items = [f'<span><i style="background:{colour}"></i>{html.escape(name)}</span>' for name, colour in
             KIND_STYLE.values()]  # fmt: skip
    items.append('<span><i style="background:#282828"></i>loss mask (lower band): carries a loss</span>')
    return f'<p class="legend">{"".join(items)}</p>'


def _sample_html(number: int, sample: SampleView) -> str:
    figures, texts = [], []
    for piece in sample.pieces:
        if piece.pixels is not None:
            height, width = piece.pixels.shape[:2]
            caption = html.escape(f"{piece.label.strip('[]')} ({width} x {height} px)")
            figures.append(f'<figure><img alt="{caption}" src="{data_uri(thumbnail(piece.pixels))}">'
                           f"<figcaption>{caption}</figcaption></figure>")  # fmt: skip
        elif piece.text is not None:
            texts.append(f"<b>{html.escape(piece.role)}</b><pre>{html.escape(piece.text)}</pre>")
        else:
            texts.append(f"<pre>{html.escape(piece.label)}</pre>")
    start, end = sample.span
    where = html.escape(sample.location or "(source not recorded)")
    meta = (f"sample {number}: group <b>{html.escape(sample.group)}</b>, from <code>{where}</code>, position "
            f"{html.escape(str(sample.position))}, worker {sample.worker}, tokens {start}..{end - 1} ({end - start})")  # fmt: skip
    strip = data_uri(strip_pixels(sample.kinds, sample.loss))
    return (f'<div class="sample"><div class="images">{"".join(figures) or "(no image)"}</div><div class="texts">'
            f'<div class="meta">{meta}</div>{"".join(texts)}'
            f'<img class="strip" alt="token kinds and loss mask" src="{strip}"></div></div>')  # fmt: skip


def _shares_html(shares: Sequence[Share], mix_by: str) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(s.group)}</td><td>{s.target:.1%}</td><td>{s.samples:.1%}</td><td>{s.tokens:.1%}</td></tr>"
        for s in shares
    )
    return (f"<h2>Mixture</h2><p>Targets are the groups' weights as shares (mix_by: {html.escape(mix_by)}: "
            f"the weights split {'tokens' if mix_by == 'tokens' else 'sample draws'}); a few packs are a small "
            "sample of the stream.</p><table><tr><th>group</th><th>target</th><th>share of samples</th>"
            f"<th>share of tokens</th></tr>{rows}</table>")  # fmt: skip


def _skips_html(skips: Mapping[str, Mapping[str, tuple[int, str]]]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(group)}</td><td>{html.escape(reason)}</td><td>{count}</td>"
        f"<td><code>{html.escape(example)}</code></td></tr>"
        for group, reasons in sorted(skips.items())
        for reason, (count, example) in sorted(reasons.items())
    )
    if not rows:
        return "<h2>Skipped rows</h2><p>none while these packs were made</p>"
    return ("<h2>Skipped rows</h2><p>reasons are listed in docs/bad_data.md</p><table><tr><th>group</th>"
            f"<th>reason</th><th>rows</th><th>first one</th></tr>{rows}</table>")  # fmt: skip


def write_page(
    path: Path,
    title: str,
    packs: Sequence[PackView],
    shares: Sequence[Share],
    skips: Mapping[str, Mapping[str, tuple[int, str]]],
    mix_by: str = "samples",
) -> Path:
    """Write the page to `path` and return it."""
    body = [f"<h1>{html.escape(title)}</h1>", _shares_html(shares, mix_by), _skips_html(skips), _legend()]
    for pack in packs:
        body.append(f"<h2>Pack {pack.index}: {pack.tokens} tokens ({pack.fill:.1%} full), "
                    f"{len(pack.samples)} samples</h2>")  # fmt: skip
        body.extend(_sample_html(number, sample) for number, sample in enumerate(pack.samples))
    page = (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")  # fmt: skip
    path.write_text(page, encoding="utf-8")
    return path
