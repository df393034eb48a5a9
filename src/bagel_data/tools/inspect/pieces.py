"""A pack read back into its samples and their pieces: texts, and images as pixels.

`position_kinds` says what each position is; `PackReader` walks a pack's positions in
order and turns runs of them back into plan pieces (a text and whether it carries the loss,
a ViT or VAE image with its pixels rebuilt from the batch); `render_pack_text` is the text
view made from them, `page.py` the HTML one. Nothing here needs matplotlib.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import torch

from ...media.pixels import normalize_pixels
from .plots import KIND_STYLE, UNKNOWN_KIND, PositionKind


def as_dict(batch) -> dict:
    # uint8 pixels (pixel_format: uint8) are read as the float batch has them.
    return normalize_pixels(batch.to_dict(raw=True) if hasattr(batch, "to_dict") else dict(batch))


def array(batch: dict, key: str) -> np.ndarray:
    value = batch.get(key)
    if value is None:
        return np.zeros(0, dtype=np.int64)
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def special_ids(special_tokens) -> dict[str, int]:
    if dataclasses.is_dataclass(special_tokens) and not isinstance(special_tokens, type):
        return dataclasses.asdict(special_tokens)
    return {name: int(value) for name, value in dict(special_tokens).items()}


def sample_spans(batch) -> list[tuple[int, int]]:
    """(start, end) of every packed sample; the flex padding entry is not a sample."""
    batch = as_dict(batch)
    ends = np.cumsum(batch["sample_lens"][: len(batch["batch_data_indexes"])]).tolist()
    return list(zip([0, *ends[:-1]], ends))


def position_kinds(batch, special_tokens) -> np.ndarray:
    """One `PositionKind` code (int8) per position of the pack; specials found by token id."""
    batch = as_dict(batch)
    kinds = np.full(int(batch["sequence_length"]), UNKNOWN_KIND, dtype=np.int8)
    text_indexes, text_ids = array(batch, "packed_text_indexes"), array(batch, "packed_text_ids")
    kinds[text_indexes] = PositionKind.TEXT
    kinds[text_indexes[np.isin(text_ids, list(special_ids(special_tokens).values()))]] = PositionKind.SPECIAL
    ce = array(batch, "ce_loss_indexes")
    kinds[ce[kinds[ce] == PositionKind.TEXT]] = PositionKind.TEXT_LOSS
    kinds[array(batch, "packed_vit_token_indexes")] = PositionKind.VIT
    kinds[array(batch, "packed_vae_token_indexes")] = PositionKind.VAE
    kinds[array(batch, "mse_loss_indexes")] = PositionKind.VAE_LOSS
    return kinds


def loss_mask(batch) -> np.ndarray:
    """One bool per position: whether it carries a loss (cross-entropy or flow matching)."""
    batch = as_dict(batch)
    mask = np.zeros(int(batch["sequence_length"]), dtype=bool)
    mask[array(batch, "ce_loss_indexes")] = True
    mask[array(batch, "mse_loss_indexes")] = True
    return mask


@dataclasses.dataclass(frozen=True)
class Piece:
    """One piece of a sample: `label` is its line in the text view; `text` the decoded text
    (None for an image); `pixels` an image's RGB uint8 `(H, W, 3)` (None for a text)."""

    label: str
    text: str | None = None
    pixels: np.ndarray | None = None
    role: str = ""  # a text's: "text" or "text, supervised"


def _rgb(normalized: np.ndarray) -> np.ndarray:
    # The default transforms normalize with mean 0.5 and std 0.5 per channel.
    return np.clip(np.rint((normalized * 0.5 + 0.5) * 255.0), 0, 255).astype(np.uint8)


def clip(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")


class PackReader:
    """Walks a pack's positions in order, turning runs of positions back into plan pieces.

    `patch` / `downsample` (the ViT patch size and the VAE's pixels per latent) are what the
    pixels of an image are rebuilt with; without them an image piece has no pixels."""

    def __init__(self, batch, tokenizer, special_tokens, max_num_patch_per_side: int, patch=None, downsample=None):
        self.batch = batch = as_dict(batch)
        self.tokenizer, self.m, self.patch, self.downsample = tokenizer, max_num_patch_per_side, patch, downsample
        self.special = special_ids(special_tokens)
        self.kinds = position_kinds(batch, special_tokens)
        self.ids = np.full(len(self.kinds), -1, dtype=np.int64)
        self.ids[array(batch, "packed_text_indexes")] = array(batch, "packed_text_ids")
        self.vit_offsets = itertools.accumulate(array(batch, "vit_token_seqlens").tolist(), initial=0)
        self.vae_shapes = iter(enumerate(batch.get("patchified_vae_latent_shapes") or []))

    def pieces(self, start: int, end: int) -> list[Piece]:
        found, p = [], start
        while p < end:
            token = self.ids[p]
            if token == self.special["start_of_image"] and p + 1 < end and self.kinds[p + 1] >= PositionKind.VIT:
                q = p + 1
                while q < end and self.kinds[q] == self.kinds[p + 1]:
                    q += 1
                found.append(self._image(p + 1, q))
                p = q + (q < end and self.ids[q] == self.special["end_of_image"])
            elif token == self.special["bos_token_id"]:
                q = p + 1
                while q < end and self.ids[q] >= 0 and self.ids[q] not in (self.special["eos_token_id"], token):
                    q += 1
                loss = bool(np.any(self.kinds[p:q] == PositionKind.TEXT_LOSS))
                text = self.tokenizer.decode(self.ids[p + 1 : q].tolist())
                role = "text, supervised" if loss else "text"
                found.append(Piece(f"{role:<16} {clip(text)}", text, role=role))
                p = q + (q < end and self.ids[q] == self.special["eos_token_id"])
            else:  # a stray run (e.g. a special-token string inside text): shown, not hidden
                q = p + 1
                while q < end and self.kinds[q] == self.kinds[p] and self.ids[q] != self.special["bos_token_id"]:
                    q += 1
                label = KIND_STYLE[PositionKind(self.kinds[p])][0] if self.kinds[p] >= 0 else "unknown"
                found.append(Piece(f"[{q - p} {label} position(s)]"))
                p = q
        return found

    def _image(self, first: int, stop: int) -> Piece:
        if self.kinds[first] == PositionKind.VIT:
            offset = next(self.vit_offsets)
            ids = array(self.batch, "packed_vit_position_ids")[offset : offset + stop - first]
            rows, cols = len(np.unique(ids // self.m)), len(np.unique(ids % self.m))
            pixels = self._vit_pixels(offset, stop - first, rows, cols)
            return Piece(f"[ViT image {rows} x {cols} patches, understood]", pixels=pixels)
        index, (h, w) = next(self.vae_shapes)
        role = "generated (loss)" if self.kinds[first] == PositionKind.VAE_LOSS else "conditioned"
        pixels = None
        if self.downsample and self.batch.get("padded_images") is not None:
            image = self.batch["padded_images"][index][:, : h * self.downsample, : w * self.downsample]
            pixels = _rgb(image.float().permute(1, 2, 0).cpu().numpy())
        return Piece(f"[VAE image {h} x {w} latents, {role}]", pixels=pixels)

    def _vit_pixels(self, offset: int, count: int, rows: int, cols: int) -> np.ndarray | None:
        """The patches laid back out row by row (the order the patchifier wrote them)."""
        tokens = self.batch.get("packed_vit_tokens")
        if not self.patch or tokens is None or rows * cols != count:
            return None
        p = self.patch
        patches = tokens[offset : offset + count].float().cpu().numpy().reshape(rows, cols, p, p, -1)
        return _rgb(patches.transpose(0, 2, 1, 3, 4).reshape(rows * p, cols * p, -1)[:, :, :3])


def render_pack_text(
    batch, tokenizer, special_tokens, *, max_num_patch_per_side: int = 70, locations: list[str] | None = None
) -> str:
    """Every sample of the pack: its group and position (and its file and row, where
    `locations` gives them), then its pieces in order.

    Each piece names its role: supervised text (loss), understood (ViT), conditioned (VAE)
    or generated (VAE with loss). Items dropped by CFG dropout are not in the pack and so
    not shown. ViT grid sizes are read from the position ids, which needs the run's
    `max_num_patch_per_side`.
    """
    batch = as_dict(batch)
    reader = PackReader(batch, tokenizer, special_tokens, max_num_patch_per_side)
    spans = sample_spans(batch)
    lines = [f"pack: {batch['sequence_length']} tokens, {len(spans)} samples"]
    for number, ((start, end), where) in enumerate(zip(spans, batch["batch_data_indexes"])):
        lines.append(
            f"  sample {number}: group {where['dataset_name']}, position {where['data_indexes']}, "
            f"worker {where['worker_id']}, tokens {start}..{end - 1} ({end - start})"
        )
        if locations is not None and number < len(locations):
            lines.append(f"    from {locations[number]}")
        lines.extend(f"    {piece.label}" for piece in reader.pieces(start, end))
    return "\n".join(lines) + "\n"
