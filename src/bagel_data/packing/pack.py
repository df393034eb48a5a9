"""Laying samples end to end in one pack, and turning the pack into the batch dict.

`PackBuilder.add(sample)` walks a sample's plan (docs/samples.md, docs/formats/batch.md): text gets `[bos] + ids +
[eos]`, a ViT image `start_of_image + patches + end_of_image`, a VAE image
`start_of_image + latent tokens + end_of_image`; each item records its positions, rotary ids,
losses and attention split. Pieces are numpy chunks joined once in `to_batch()`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..compat import CompatPolicy, RandomSource
from ..errors import ConfigError
from ..instruments import seam
from ..media.pixels import pad_pixels, stack_pixel_patches
from .buffers import PadBufferPool, pad_images, stack_patches
from .config import PackingConfig, SpecialTokens
from .dropout import is_droppable
from .layout import len2weight, patchify, prepare_attention_mask_per_sample


class _Chunks:
    """Append-only list of int or float chunks joined into one array at the end."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.parts: list[np.ndarray] = []

    def span(self, start: int, stop: int) -> None:
        self.parts.append(np.arange(start, stop, dtype=self.dtype))

    def extend(self, values) -> None:
        self.parts.append(np.asarray(values, dtype=self.dtype))

    def fill(self, value, count: int) -> None:
        self.parts.append(np.full(count, value, dtype=self.dtype))

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def tensor(self) -> torch.Tensor:
        if not self.parts:
            return torch.from_numpy(np.zeros(0, dtype=self.dtype))
        return torch.from_numpy(np.concatenate(self.parts))


@dataclasses.dataclass
class _SampleWalk:
    """What `PackBuilder.add` carries from one plan item of a sample to the next."""

    rope: int = 0  # the next rotary position id
    split_len: int = 0  # tokens of the attention split in progress
    timestep: float = float("-inf")  # the noise level of the VAE split in progress
    splits: list[int] = dataclasses.field(default_factory=list)
    modes: list[str] = dataclasses.field(default_factory=list)


class PackBuilder:
    """One pack under construction."""

    def __init__(
        self,
        config: PackingConfig,
        tokens: SpecialTokens,
        rng: RandomSource | np.random.Generator,
        position_ids: Callable,
        pad_pool: PadBufferPool | None = None,
        policy: CompatPolicy | None = None,
    ):
        self.config, self.tokens, self.rng, self.position_ids = config, tokens, rng, position_ids
        self.pad_pool = pad_pool
        self.policy = CompatPolicy() if policy is None else policy  # whose counts and draws
        self.curr = 0
        self.sample_lens: list[int] = []
        self.split_lens: list[int] = []
        self.attn_modes: list[str] = []
        self.nested_attention_masks: list[torch.Tensor] = []
        self.text_ids, self.text_indexes = _Chunks(np.int64), _Chunks(np.int64)
        self.position = _Chunks(np.int64)
        self.label_ids, self.ce_indexes = _Chunks(np.int64), _Chunks(np.int64)
        self.ce_weights = _Chunks(np.float32)
        self.vae_images: list[torch.Tensor] = []
        self.latent_shapes: list[tuple[int, int]] = []
        self.latent_position_ids: list[torch.Tensor] = []
        self.vae_indexes, self.timesteps, self.mse_indexes = _Chunks(np.int64), _Chunks(np.float32), _Chunks(np.int64)
        self.vit_tokens: list[torch.Tensor] = []
        self.vit_position_ids: list[torch.Tensor] = []
        self.vit_indexes = _Chunks(np.int64)
        self.vit_seqlens: list[int] = []
        self.data_indexes: list = []

    def is_empty(self) -> bool:
        return self.curr == 0

    def _dropped(self, item: dict, probability: float, decided: bool | None) -> bool:
        """Whether CFG drops `item`: `decided` when the sample was drawn (`packing/dropout.py`),
        else (compat, or a sample added by hand) drawn now from the pack's generator. A decided
        CFG item still takes its (unused) draw, so the group choices and timesteps are those of
        the reference's order: with every dropout at 0 the output is unchanged. An item that
        may never drop (`is_droppable`) takes no draw."""
        if not is_droppable(item, self.policy):  # type: ignore[arg-type]
            return False
        drawn = item["enable_cfg"] == 1 and self.rng.random() < probability
        return drawn if decided is None else decided

    def _special(self, token: int, item: dict) -> None:
        """An end token (`eos` / `end_of_image`) at `curr`, with its optional loss."""
        self.text_ids.extend([token])
        self.text_indexes.extend([self.curr])
        if item["special_token_loss"] == 1:
            self.ce_indexes.extend([self.curr])
            self.ce_weights.extend([1.0])
            self.label_ids.extend([item["special_token_label"]])
        self.curr += 1

    @seam("pack")
    def add(self, sample: dict, dropped: frozenset[int] | None = None) -> bool:
        """Append one sample; consumes its id and tensor lists in plan order. `dropped`: the
        CFG items decided to drop when it was drawn (`Draw.dropped`); None: drawn here.
        False (and the pack unchanged) when CFG dropout dropped every item: a zero-length
        sample would break the batch schema (`check_batch`)."""
        texts = iter(sample["text_ids_list"])
        images = iter(sample["image_tensor_list"])
        start_of_sample = self.curr
        walk = _SampleWalk()
        for index, item in enumerate(sample["sequence_plan"]):
            split_start = item.get("split_start", True)
            if split_start:
                walk.split_len = 0
            kind = item["type"]
            drop = None if dropped is None else index in dropped
            if kind == "text":
                added = self._add_text(item, next(texts), walk, drop)
            elif kind == "vit_image":
                added = self._add_vit_image(item, next(images), walk, drop)
            elif kind == "vae_image":
                added = self._add_vae_image(item, next(images), walk, split_start, drop)
            else:
                raise ValueError(f"unknown plan item type {kind!r}")
            if added and item.get("split_end", True):
                walk.splits.append(walk.split_len)
        if self.curr == start_of_sample:  # nothing was added: dropout takes its draws only
            return False
        self.sample_lens.append(self.curr - start_of_sample)
        if self.config.use_flex:
            self.split_lens.extend(walk.splits)
            self.attn_modes.extend(walk.modes)
        else:
            self.nested_attention_masks.append(prepare_attention_mask_per_sample(walk.splits, walk.modes))
        self.data_indexes.append(sample["data_indexes"])
        return True

    def _add_text(self, item: dict, ids: list[int], walk: _SampleWalk, drop: bool | None) -> bool:
        """`[bos] + ids + [eos]`, causal; False when classifier-free guidance dropped it."""
        if self._dropped(item, self.config.text_cond_dropout_prob, drop):
            return False
        first = self.curr
        shifted = [self.tokens.bos_token_id, *ids]
        self.text_ids.extend(shifted)
        self.text_indexes.span(self.curr, self.curr + len(shifted))
        if item["loss"] == 1:
            self.ce_indexes.span(self.curr, self.curr + len(shifted))
            self.ce_weights.fill(len2weight(len(shifted)), len(shifted))
            self.label_ids.extend([*ids, self.tokens.eos_token_id])
        self.curr += len(shifted)
        self._special(self.tokens.eos_token_id, item)
        walk.split_len += self.curr - first
        walk.modes.append("causal")
        # One rotary id per position of this item (the reference used the split's
        # running length, which over-counts when a split spans several items).
        # compat keeps the reference's count (docs/compat.md).
        count = walk.split_len if self.policy.counts_rope_by_split else self.curr - first
        self.position.span(walk.rope, walk.rope + count)
        walk.rope += count
        return True

    def _add_vit_image(self, item: dict, image: torch.Tensor, walk: _SampleWalk, drop: bool | None) -> bool:
        """`start_of_image + patches + end_of_image`, full attention, one rotary id."""
        cfg = self.config
        if self._dropped(item, cfg.vit_cond_dropout_prob, drop):
            walk.rope += 1
            return False
        first = self.curr
        self._special(self.tokens.start_of_image, {"special_token_loss": 0})
        patches = patchify(image, cfg.vit_patch_size)
        self.vit_indexes.span(self.curr, self.curr + len(patches))
        self.curr += len(patches)
        self.vit_tokens.append(patches)
        self.vit_seqlens.append(len(patches))
        self.vit_position_ids.append(
            self.position_ids(image.shape[1], image.shape[2], cfg.vit_patch_size, cfg.max_num_patch_per_side)
        )
        self._special(self.tokens.end_of_image, item)
        walk.split_len += self.curr - first
        walk.modes.append("full")
        self.position.fill(walk.rope, self.curr - first)
        walk.rope += 1
        return True

    def _add_vae_image(
        self, item: dict, image: torch.Tensor, walk: _SampleWalk, split_start: bool, drop: bool | None
    ) -> bool:
        """`start_of_image + latent tokens + end_of_image`; a generation target is a noised split."""
        cfg = self.config
        if self._dropped(item, cfg.vae_cond_dropout_prob, drop):
            walk.rope += 1
            return False
        first = self.curr
        self._special(self.tokens.start_of_image, {"special_token_loss": 0})
        d = cfg.vae_image_downsample
        h, w = image.shape[1] // d, image.shape[2] // d
        self.vae_images.append(image)
        self.latent_position_ids.append(self.position_ids(image.shape[1], image.shape[2], d, cfg.max_latent_size))
        self.latent_shapes.append((h, w))
        self.vae_indexes.span(self.curr, self.curr + h * w)
        if item["loss"] == 1:
            self.mse_indexes.span(self.curr, self.curr + h * w)
            if split_start:  # the frames of one split share its noise level
                walk.timestep = float(self.rng.standard_normal())
        else:
            walk.timestep = float("-inf")
        self.timesteps.fill(walk.timestep, h * w)
        self.curr += h * w
        self._special(self.tokens.end_of_image, item)
        walk.split_len += self.curr - first
        if split_start:
            walk.modes.append("noise" if item["loss"] == 1 and "frame_delta" not in item else "full")
        self.position.fill(walk.rope, h * w + 2)
        if "frame_delta" in item:
            walk.rope += item["frame_delta"]
        elif item["loss"] == 0:
            walk.rope += 1
        return True

    @seam("to_batch")
    def to_batch(self) -> dict:
        """The packed batch dict of docs/formats/batch.md."""
        batch: dict[str, Any] = dict(
            sequence_length=self.curr,
            sample_lens=list(self.sample_lens),
            packed_text_ids=self.text_ids.tensor(),
            packed_text_indexes=self.text_indexes.tensor(),
            packed_position_ids=self.position.tensor(),
        )
        if self.config.use_flex:
            pad = self.config.max_num_tokens - self.curr
            if pad < 0:
                raise ConfigError(
                    "max_num_tokens",
                    self.config.max_num_tokens,
                    f"a pack reached {self.curr} tokens (its mandatory samples are packed without the "
                    "budget check); lower max_num_tokens_per_sample or make fewer groups mandatory",
                )
            batch["split_lens"] = self.split_lens + [pad]
            batch["attn_modes"] = self.attn_modes + ["causal"]
            batch["sample_lens"] = batch["sample_lens"] + [pad]
        else:
            batch["nested_attention_masks"] = self.nested_attention_masks
        raw = self.config.pixel_format == "uint8"  # bytes + mean / std (media/pixels.py)
        if self.vae_images:
            if raw:
                batch.update(pad_pixels(self.vae_images, self.pad_pool))
            else:
                batch["padded_images"] = pad_images(self.vae_images, self.pad_pool)
            batch["patchified_vae_latent_shapes"] = list(self.latent_shapes)
            batch["packed_latent_position_ids"] = torch.cat(self.latent_position_ids)
            batch["packed_vae_token_indexes"] = self.vae_indexes.tensor()
        if self.vit_tokens:
            if raw:
                batch.update(stack_pixel_patches(self.vit_tokens, self.pad_pool))
            else:
                batch["packed_vit_tokens"] = stack_patches(self.vit_tokens, self.pad_pool)
            batch["packed_vit_position_ids"] = torch.cat(self.vit_position_ids)
            batch["packed_vit_token_indexes"] = self.vit_indexes.tensor()
            batch["vit_token_seqlens"] = torch.tensor(self.vit_seqlens, dtype=torch.int64)
        if len(self.timesteps):
            batch["packed_timesteps"] = self.timesteps.tensor()
            batch["mse_loss_indexes"] = self.mse_indexes.tensor()
        if len(self.label_ids):
            batch["packed_label_ids"] = self.label_ids.tensor()
            batch["ce_loss_indexes"] = self.ce_indexes.tensor()
            batch["ce_loss_weights"] = self.ce_weights.tensor()
        batch["batch_data_indexes"] = list(self.data_indexes)
        if self.pad_pool is not None:
            self.pad_pool.gather_small(batch)  # in a worker: the small tensors leave in one segment
        return batch
