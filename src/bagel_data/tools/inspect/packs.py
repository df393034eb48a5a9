"""Looking at packs: what each position is, who attends to whom, and how full packs are.

`inspect_packs` builds the packed dataset of a run config in this process, draws the first
packs and writes their text rendering. The pure functions (`position_kinds`,
`attention_fraction`, `render_pack_text`) work on one batch dict and are what the pictures
are made from; the pictures themselves are drawn by `plots.py`.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from ...media.pixels import normalize_pixels
from ...packing.layout import attention_allowed
from ..run import RunConfig, build_from_run_config, load_run_config
from .plots import (
    KIND_STYLE,
    UNKNOWN_KIND,
    PositionKind,
    draw_attention,
    draw_histograms,
    draw_strip,
)
from .steps import config_at_step


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
    # uint8 pixels (pixel_format: uint8) are drawn as the float batch has them.
    return normalize_pixels(batch.to_dict(raw=True) if hasattr(batch, "to_dict") else dict(batch))


def _array(batch: dict, key: str) -> np.ndarray:
    value = batch.get(key)
    if value is None:
        return np.zeros(0, dtype=np.int64)
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _special_ids(special_tokens) -> dict[str, int]:
    if dataclasses.is_dataclass(special_tokens) and not isinstance(special_tokens, type):
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
    kinds = np.full(int(batch["sequence_length"]), UNKNOWN_KIND, dtype=np.int8)
    text_indexes, text_ids = _array(batch, "packed_text_indexes"), _array(batch, "packed_text_ids")
    kinds[text_indexes] = PositionKind.TEXT
    kinds[text_indexes[np.isin(text_ids, list(_special_ids(special_tokens).values()))]] = PositionKind.SPECIAL
    ce = _array(batch, "ce_loss_indexes")
    kinds[ce[kinds[ce] == PositionKind.TEXT]] = PositionKind.TEXT_LOSS
    kinds[_array(batch, "packed_vit_token_indexes")] = PositionKind.VIT
    kinds[_array(batch, "packed_vae_token_indexes")] = PositionKind.VAE
    kinds[_array(batch, "mse_loss_indexes")] = PositionKind.VAE_LOSS
    return kinds


def _sample_masks(batch: dict):
    """(start, allowed L x L) per sample, from the dense masks or rebuilt from the flex splits."""
    spans = sample_spans(batch)
    if "nested_attention_masks" in batch:
        for (start, _), mask in zip(spans, batch["nested_attention_masks"]):
            yield start, (mask == 0).cpu().numpy()
        return
    splits = iter(zip(batch["split_lens"], batch["attn_modes"]))
    for start, end in spans:
        if end == start:  # a zero-length sample has no splits (and no attention to draw)
            continue
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
        if not len(allowed):  # a zero-length sample: nothing to add (reduceat needs one cell)
            continue
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
                lines.append(f"{'text, supervised' if loss else 'text':<16} {_clip(text)}")
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
            return f"[ViT image {rows} x {cols} patches, understood]"
        h, w = next(self.vae_shapes)
        role = "generated (loss)" if self.kinds[first] == PositionKind.VAE_LOSS else "conditioned"
        return f"[VAE image {h} x {w} latents, {role}]"


def render_pack_text(batch, tokenizer, special_tokens, *, max_num_patch_per_side: int = 70) -> str:
    """Every sample of the pack: its group and position, then its pieces in order.

    Each piece names its role: supervised text (loss), understood (ViT), conditioned (VAE)
    or generated (VAE with loss). Items dropped by CFG dropout are not in the pack and so
    not shown. ViT grid sizes are
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
    num_workers: int = 1,
    world_size: int = 1,
    rank: int = 0,
    step: int = 0,
) -> InspectReport:
    """Draw the first `num_batches` packs of a run config into `out_dir`: those of worker 0
    of `rank` in a job of `world_size` ranks x `num_workers` workers, with the groups'
    weights of training step `step` (`steps.py`: a staged config's later stage).

    `tokenizer` is None / "qwen2" / a local HF tokenizer folder, or a tokenizer object.
    """
    config = _resolve_config(run_config, dataset_info)
    if step:
        config = config_at_step(config, step)
    dataset, tok, special_tokens = build_from_run_config(
        config, rank=rank, world_size=world_size, num_workers=num_workers, tokenizer=tokenizer
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    packs = [
        _draw_pack(out, index, batch, dataset.config, tok, special_tokens)
        for index, batch in enumerate(itertools.islice(iter(dataset), num_batches))
    ]
    lengths: dict[str, list[int]] = defaultdict(list)
    for pack in packs:
        for group, length in pack.lengths:
            lengths[group].append(length)
    fills = [pack.fill for pack in packs]
    texts = [pack.text for pack in packs]
    histogram = draw_histograms(out / "histograms.png", lengths, fills)
    text_path = out / "packs.txt"
    text_path.write_text("\n".join(texts), encoding="utf-8")
    return InspectReport(
        out,
        tuple(pack.strip for pack in packs),
        tuple(pack.attention for pack in packs),
        histogram,
        text_path,
        "\n".join(texts),
        tuple(texts),
        tuple(fills),
        {group: tuple(values) for group, values in lengths.items()},
    )


@dataclasses.dataclass(frozen=True)
class _DrawnPack:
    """One pack as `inspect_packs` drew it: its pictures, text, fill and sample lengths."""

    strip: Path
    attention: Path
    text: str
    fill: float
    lengths: list[tuple[str, int]]  # (group, tokens) of each sample, in pack order


def _draw_pack(out: Path, index: int, batch: dict, config, tok, special_tokens) -> _DrawnPack:
    """Pack `index`'s strip of position kinds and attention picture under `out`, and its text."""
    spans = sample_spans(batch)
    groups = [where["dataset_name"] for where in batch["batch_data_indexes"]]
    fill = batch["sequence_length"] / config.max_num_tokens
    title = f"pack {index}: {batch['sequence_length']} tokens ({fill:.1%} of max_num_tokens), {len(spans)} samples"
    kinds = position_kinds(batch, special_tokens)
    strip = draw_strip(out / f"pack_{index}_strip.png", kinds, spans, groups, title)
    fraction = attention_fraction(batch)
    attention = draw_attention(out / f"pack_{index}_attention.png", fraction, batch["sequence_length"], title)
    text = render_pack_text(batch, tok, special_tokens, max_num_patch_per_side=config.max_num_patch_per_side)
    lengths = [(group, end - start) for (start, end), group in zip(spans, groups)]
    return _DrawnPack(strip, attention, f"=== pack {index} ===\n{text}", fill, lengths)
