"""Looking at packs: what each position is, who attends to whom, and how full packs are.

`inspect_packs` builds the packed dataset of a run config in this process, draws the first
packs and writes their text rendering. The pure functions (`position_kinds`,
`attention_fraction`, `render_pack_text`) work on one batch dict and are what the pictures
are made from. Plotting uses `matplotlib.figure.Figure` directly, so no global matplotlib
state (backend, pyplot figures) is touched.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import os
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from ..datasets import make_bagel_multimodal_dataset
from ..packing.layout import attention_allowed
from ..runner import RunConfig, load_run_config
from ..tokenizer import add_special_tokens, load_tokenizer


class PositionKind(enum.IntEnum):
    TEXT = 0
    TEXT_LOSS = 1
    SPECIAL = 2
    VIT = 3
    VAE_LOSS = 4
    VAE = 5


KIND_STYLE = {
    PositionKind.TEXT: ("text", "#a6cee3"),
    PositionKind.TEXT_LOSS: ("text with loss", "#1f4e9c"),
    PositionKind.SPECIAL: ("special token", "#ff9f1c"),
    PositionKind.VIT: ("ViT patch", "#33a02c"),
    PositionKind.VAE_LOSS: ("VAE latent with loss", "#e31a1c"),
    PositionKind.VAE: ("VAE latent", "#f4a6a6"),
}
_UNKNOWN = -1  # a position no index names; a well-formed pack has none


@dataclasses.dataclass(frozen=True)
class InspectReport:
    out_dir: Path
    strip_paths: tuple[Path, ...]
    attention_paths: tuple[Path, ...]
    histogram_path: Path
    text_path: Path
    text: str
    pack_texts: tuple[str, ...]
    fill_ratios: tuple[float, ...]
    sample_lengths: Mapping[str, tuple[int, ...]]

    @property
    def num_packs(self) -> int:
        return len(self.strip_paths)


def _as_dict(batch) -> dict:
    return batch.to_dict() if hasattr(batch, "to_dict") else dict(batch)


def _array(batch: dict, key: str) -> np.ndarray:
    value = batch.get(key)
    if value is None:
        return np.zeros(0, dtype=np.int64)
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _special_ids(special_tokens) -> dict[str, int]:
    if dataclasses.is_dataclass(special_tokens):
        return dataclasses.asdict(special_tokens)
    return {name: int(value) for name, value in dict(special_tokens).items()}


def _num_samples(batch: dict) -> int:
    return len(batch["batch_data_indexes"])


def sample_spans(batch) -> list[tuple[int, int]]:
    """(start, end) of every packed sample; the flex padding entry is not a sample."""
    batch = _as_dict(batch)
    ends = np.cumsum(batch["sample_lens"][: _num_samples(batch)]).tolist()
    return list(zip([0, *ends[:-1]], ends))


def position_kinds(batch, special_tokens) -> np.ndarray:
    """One `PositionKind` code (int8) per position of the pack; specials found by token id."""
    batch = _as_dict(batch)
    kinds = np.full(int(batch["sequence_length"]), _UNKNOWN, dtype=np.int8)
    text_indexes, text_ids = _array(batch, "packed_text_indexes"), _array(batch, "packed_text_ids")
    kinds[text_indexes] = PositionKind.TEXT
    kinds[text_indexes[np.isin(text_ids, list(_special_ids(special_tokens).values()))]] = PositionKind.SPECIAL
    ce = _array(batch, "ce_loss_indexes")
    kinds[ce[kinds[ce] == PositionKind.TEXT]] = PositionKind.TEXT_LOSS
    kinds[_array(batch, "packed_vit_token_indexes")] = PositionKind.VIT
    kinds[_array(batch, "packed_vae_token_indexes")] = PositionKind.VAE
    kinds[_array(batch, "mse_loss_indexes")] = PositionKind.VAE_LOSS
    return kinds


def strip_columns(kinds: np.ndarray, max_columns: int = 2000) -> np.ndarray:
    """The kind codes downsampled to at most `max_columns`, each column its majority kind."""
    columns = max(1, min(len(kinds), max_columns))
    column_of = np.arange(len(kinds)) * columns // max(len(kinds), 1)
    codes = kinds.astype(np.int64) - _UNKNOWN  # shifted so that every code is >= 0
    width = len(KIND_STYLE) + 1
    counts = np.bincount(column_of * width + codes, minlength=columns * width).reshape(columns, width)
    return (counts.argmax(axis=1) + _UNKNOWN).astype(np.int8)


def _sample_masks(batch: dict):
    """(start, allowed L x L) per sample, from the dense masks or rebuilt from the flex splits."""
    spans = sample_spans(batch)
    if "nested_attention_masks" in batch:
        for (start, _), mask in zip(spans, batch["nested_attention_masks"]):
            yield start, (mask == 0).cpu().numpy()
        return
    splits = iter(zip(batch["split_lens"], batch["attn_modes"]))
    for start, end in spans:
        lens, modes, total = [], [], 0
        while total < end - start:
            length, mode = next(splits)
            lens.append(int(length))
            modes.append(mode)
            total += int(length)
        yield start, attention_allowed(lens, modes)


def attention_fraction(batch, max_side: int = 512) -> np.ndarray:
    """The pack's attention pattern downsampled to at most `max_side` square: per cell, the
    fraction of (query, key) pairs allowed. Padding after `sequence_length` is left out.

    Only one sample's mask exists at a time, so long packs do not need an L x L matrix.
    """
    batch = _as_dict(batch)
    length = int(batch["sequence_length"])
    side = max(1, min(max_side, length))
    edges = np.arange(side + 1) * length // side
    cell_of = np.repeat(np.arange(side), np.diff(edges))
    allowed_pairs = np.zeros((side, side), dtype=np.float64)
    for start, allowed in _sample_masks(batch):
        cells = cell_of[start : start + len(allowed)]
        cuts = np.concatenate([[0], np.flatnonzero(np.diff(cells)) + 1])
        summed = np.add.reduceat(np.add.reduceat(allowed, cuts, axis=0, dtype=np.int64), cuts, axis=1)
        allowed_pairs[np.ix_(cells[cuts], cells[cuts])] += summed
    sizes = np.diff(edges).astype(np.float64)
    return allowed_pairs / np.outer(sizes, sizes)


# -- text rendering ------------------------------------------------------------------------
def _clip(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")


class _PackReader:
    """Walks a pack's positions in order, turning runs of positions back into plan pieces."""

    def __init__(self, batch: dict, tokenizer, special_tokens, max_num_patch_per_side: int):
        self.batch, self.tokenizer, self.m = batch, tokenizer, max_num_patch_per_side
        self.special = _special_ids(special_tokens)
        self.kinds = position_kinds(batch, special_tokens)
        self.ids = np.full(len(self.kinds), -1, dtype=np.int64)
        self.ids[_array(batch, "packed_text_indexes")] = _array(batch, "packed_text_ids")
        self.vit_offsets = itertools.accumulate(_array(batch, "vit_token_seqlens").tolist(), initial=0)
        self.vae_shapes = iter(batch.get("patchified_vae_latent_shapes") or [])

    def pieces(self, start: int, end: int) -> list[str]:
        lines, p = [], start
        while p < end:
            token = self.ids[p]
            if token == self.special["start_of_image"] and p + 1 < end and self.kinds[p + 1] >= PositionKind.VIT:
                q = p + 1
                while q < end and self.kinds[q] == self.kinds[p + 1]:
                    q += 1
                lines.append(self._image(p + 1, q))
                p = q + (q < end and self.ids[q] == self.special["end_of_image"])
            elif token == self.special["bos_token_id"]:
                q = p + 1
                while q < end and self.ids[q] >= 0 and self.ids[q] not in (self.special["eos_token_id"], token):
                    q += 1
                loss = bool(np.any(self.kinds[p:q] == PositionKind.TEXT_LOSS))
                text = self.tokenizer.decode(self.ids[p + 1 : q].tolist())
                lines.append(f"{'text, loss' if loss else 'text':<11} {_clip(text)}")
                p = q + (q < end and self.ids[q] == self.special["eos_token_id"])
            else:  # a stray run (e.g. a special-token string inside text): shown, not hidden
                q = p + 1
                while q < end and self.kinds[q] == self.kinds[p] and self.ids[q] != self.special["bos_token_id"]:
                    q += 1
                label = KIND_STYLE[PositionKind(self.kinds[p])][0] if self.kinds[p] >= 0 else "unknown"
                lines.append(f"[{q - p} {label} position(s)]")
                p = q
        return lines

    def _image(self, first: int, stop: int) -> str:
        if self.kinds[first] == PositionKind.VIT:
            offset = next(self.vit_offsets)
            ids = _array(self.batch, "packed_vit_position_ids")[offset : offset + stop - first]
            rows, cols = len(np.unique(ids // self.m)), len(np.unique(ids % self.m))
            return f"[ViT image {rows} x {cols} patches]"
        h, w = next(self.vae_shapes)
        loss = ", loss" if self.kinds[first] == PositionKind.VAE_LOSS else ""
        return f"[VAE image {h} x {w} latents{loss}]"


def render_pack_text(batch, tokenizer, special_tokens, *, max_num_patch_per_side: int = 70) -> str:
    """Every sample of the pack: its group and position, then its pieces in order.

    Items dropped by CFG dropout are not in the pack and so not shown. ViT grid sizes are
    read from the position ids, which needs the run's `max_num_patch_per_side`.
    """
    batch = _as_dict(batch)
    reader = _PackReader(batch, tokenizer, special_tokens, max_num_patch_per_side)
    spans = sample_spans(batch)
    lines = [f"pack: {batch['sequence_length']} tokens, {len(spans)} samples"]
    for number, ((start, end), where) in enumerate(zip(spans, batch["batch_data_indexes"])):
        lines.append(
            f"  sample {number}: group {where['dataset_name']}, position {where['data_indexes']}, "
            f"worker {where['worker_id']}, tokens {start}..{end - 1} ({end - start})"
        )
        lines.extend(f"    {piece}" for piece in reader.pieces(start, end))
    return "\n".join(lines) + "\n"


# -- pictures ------------------------------------------------------------------------------
def _figure(width: float, height: float, dpi: int = 100):
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # plotting is an optional dependency
        raise ImportError("inspect needs matplotlib: pip install 'bagel-data[plots]'") from exc
    return Figure(figsize=(width, height), dpi=dpi)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))


def draw_strip(path: Path, kinds: np.ndarray, spans, groups, title: str) -> Path:
    from matplotlib.patches import Patch

    columns = strip_columns(kinds)
    palette = np.array([(255, 255, 255)] + [_rgb(KIND_STYLE[kind][1]) for kind in PositionKind], dtype=np.uint8)
    raster = palette[columns.astype(np.int64) - _UNKNOWN][None, :, :]
    # Wide enough that every column gets at least one pixel: no kind vanishes on screen.
    figure = _figure(max(8.0, len(columns) / 94.0 + 0.5), 2.4)
    axes = figure.add_axes((0.03, 0.42, 0.94, 0.38))
    axes.imshow(raster, aspect="auto", interpolation="nearest", extent=(0, len(kinds), 0, 1))
    for (start, end), group in zip(spans, groups):
        if start:
            axes.axvline(start, color="black", linewidth=0.8)
        if end - start > 0.04 * len(kinds):
            axes.text((start + end) / 2, 1.08, group, ha="center", va="bottom", fontsize=8)
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


# -- the whole run -------------------------------------------------------------------------
def _resolve_config(run_config, dataset_info) -> RunConfig:
    if isinstance(run_config, RunConfig):
        return dataclasses.replace(run_config, dataset_info=os.fspath(dataset_info)) if dataset_info else run_config
    return load_run_config(os.fspath(run_config), os.fspath(dataset_info) if dataset_info else None)


def inspect_packs(
    run_config: str | os.PathLike | RunConfig,
    out_dir: str | os.PathLike,
    *,
    num_batches: int = 4,
    dataset_info: str | os.PathLike | None = None,
    tokenizer=None,
) -> InspectReport:
    """Draw the first `num_batches` packs of a run config into `out_dir`.

    `tokenizer` is None / "qwen2" / a local HF tokenizer folder, or a tokenizer object.
    """
    config = _resolve_config(run_config, dataset_info)
    tok = load_tokenizer(tokenizer) if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)) else tokenizer
    tok, special_tokens, _ = add_special_tokens(tok)
    dataset = make_bagel_multimodal_dataset(
        tokenizer=tok,
        special_tokens=special_tokens,
        grouped_datasets=config.grouped_datasets,
        dataset_info=config.dataset_info,
        num_workers=1,
        **config.packing,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    strips, attentions, texts, fills = [], [], [], []
    lengths: dict[str, list[int]] = defaultdict(list)
    for index, batch in enumerate(itertools.islice(iter(dataset), num_batches)):
        spans = sample_spans(batch)
        groups = [where["dataset_name"] for where in batch["batch_data_indexes"]]
        for (start, end), group in zip(spans, groups):
            lengths[group].append(end - start)
        fill = batch["sequence_length"] / dataset.config.max_num_tokens
        fills.append(fill)
        title = f"pack {index}: {batch['sequence_length']} tokens ({fill:.1%} of max_num_tokens), {len(spans)} samples"
        kinds = position_kinds(batch, special_tokens)
        strips.append(draw_strip(out / f"pack_{index}_strip.png", kinds, spans, groups, title))
        fraction = attention_fraction(batch)
        attentions.append(
            draw_attention(out / f"pack_{index}_attention.png", fraction, batch["sequence_length"], title)
        )
        side = dataset.config.max_num_patch_per_side
        text = render_pack_text(batch, tok, special_tokens, max_num_patch_per_side=side)
        texts.append(f"=== pack {index} ===\n{text}")
    histogram = draw_histograms(out / "histograms.png", lengths, fills)
    text_path = out / "packs.txt"
    text_path.write_text("\n".join(texts), encoding="utf-8")
    return InspectReport(
        out, tuple(strips), tuple(attentions), histogram, text_path, "\n".join(texts), tuple(texts), tuple(fills),
        {group: tuple(values) for group, values in lengths.items()},
    )
