"""The pictures of `bagel-data inspect`: position-kind strips, attention maps, histograms.

Plotting uses `matplotlib.figure.Figure` directly, so no global matplotlib state (backend,
pyplot figures) is touched.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path

import numpy as np


class PositionKind(enum.IntEnum):
    TEXT = 0
    TEXT_LOSS = 1
    SPECIAL = 2
    VIT = 3
    VAE_LOSS = 4
    VAE = 5


KIND_STYLE = {
    PositionKind.TEXT: ("text", "#a6cee3"),
    PositionKind.TEXT_LOSS: ("text with loss: supervised", "#1f4e9c"),
    PositionKind.SPECIAL: ("special token", "#ff9f1c"),
    PositionKind.VIT: ("ViT patch: understood", "#33a02c"),
    PositionKind.VAE_LOSS: ("VAE latent with loss: generated", "#e31a1c"),
    PositionKind.VAE: ("VAE latent: conditioned", "#f4a6a6"),
}
UNKNOWN_KIND = -1  # a position no index names; a well-formed pack has none


def strip_columns(kinds: np.ndarray, max_columns: int = 2000) -> np.ndarray:
    """The kind codes downsampled to at most `max_columns`, each column its majority kind."""
    columns = max(1, min(len(kinds), max_columns))
    column_of = np.arange(len(kinds)) * columns // max(len(kinds), 1)
    codes = kinds.astype(np.int64) - UNKNOWN_KIND  # shifted so that every code is >= 0
    width = len(KIND_STYLE) + 1
    counts = np.bincount(column_of * width + codes, minlength=columns * width).reshape(columns, width)
    return (counts.argmax(axis=1) + UNKNOWN_KIND).astype(np.int8)


LABEL_MIN_SHARE = 0.04  # a sample narrower than this share of the pack gets no group label


def strip_labels(spans, groups, length: int) -> list[tuple[float, str]]:
    """`(centre, group)` of each sample wide enough to carry its group's name above the
    strip: narrower ones would print their names over each other."""
    return [
        ((start + end) / 2, group)
        for (start, end), group in zip(spans, groups)
        if end - start > LABEL_MIN_SHARE * length
    ]


# -- pictures ------------------------------------------------------------------------------
def _figure(width: float, height: float, dpi: int = 100):
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # plotting is an optional dependency
        raise ImportError("inspect needs matplotlib: pip install 'bagel-data[plots]'") from exc
    return Figure(figsize=(width, height), dpi=dpi)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    red, green, blue = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return red, green, blue


def draw_strip(path: Path, kinds: np.ndarray, spans, groups, title: str) -> Path:
    # Wide enough that every column (at most 2000) gets a pixel: no kind vanishes on screen.
    # Made first, so that a missing matplotlib is named with its extra.
    figure = _figure(max(8.0, min(len(kinds), 2000) / 94.0 + 0.5), 2.4)
    from matplotlib.patches import Patch

    columns = strip_columns(kinds)
    palette = np.array([(255, 255, 255)] + [_rgb(KIND_STYLE[kind][1]) for kind in PositionKind], dtype=np.uint8)
    raster = palette[columns.astype(np.int64) - UNKNOWN_KIND][None, :, :]
    axes = figure.add_axes((0.03, 0.42, 0.94, 0.38))
    axes.imshow(raster, aspect="auto", interpolation="nearest", extent=(0, len(kinds), 0, 1))
    for start, _ in spans:
        if start:
            axes.axvline(start, color="black", linewidth=0.8)
    for centre, group in strip_labels(spans, groups, len(kinds)):
        axes.text(centre, 1.08, group, ha="center", va="bottom", fontsize=8)
    axes.set_yticks([])
    axes.set_xlim(0, len(kinds))
    axes.set_xlabel("position in the pack")
    axes.set_title(title, fontsize=10, pad=18)
    present = [kind for kind in PositionKind if np.any(kinds == kind)]
    counts = {kind: int(np.sum(kinds == kind)) for kind in present}
    handles = [Patch(color=KIND_STYLE[k][1], label=f"{KIND_STYLE[k][0]} ({counts[k]})") for k in present]
    figure.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=9)
    figure.savefig(path)
    return path


def draw_attention(path: Path, fraction: np.ndarray, length: int, title: str) -> Path:
    figure = _figure(7.0, 6.2)
    axes = figure.add_subplot()
    image = axes.imshow(fraction, cmap="Blues", vmin=0, vmax=1, interpolation="nearest", extent=(0, length, length, 0))
    figure.colorbar(image, ax=axes, label="share of (query, key) pairs allowed")
    axes.set_xlabel("key position")
    axes.set_ylabel("query position")
    axes.set_title(title, fontsize=10)
    figure.savefig(path)
    return path


def draw_histograms(path: Path, lengths: Mapping[str, list[int]], fill_ratios: list[float]) -> Path:
    figure = _figure(12.0, 4.5)
    left, right = figure.subplots(1, 2)
    every = [value for values in lengths.values() for value in values]
    bins = np.linspace(0, max(every, default=1), 30)
    for group, values in sorted(lengths.items()):
        left.hist(values, bins=bins, alpha=0.6, label=f"{group} ({len(values)})")
    left.set(title="sample lengths per group", xlabel="tokens in the pack", ylabel="samples")
    if lengths:
        left.legend(fontsize=9)
    from matplotlib.ticker import MaxNLocator

    right.bar(range(len(fill_ratios)), fill_ratios, color="#1f4e9c")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set(title="pack fill (sequence_length / max_num_tokens)", xlabel="pack", ylabel="fill", ylim=(0, 1))
    figure.subplots_adjust(left=0.06, right=0.98, wspace=0.25)
    figure.savefig(path)
    return path
