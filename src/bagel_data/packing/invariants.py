"""Structural invariants of one packed batch (docs/formats/batch.md), for tests and debugging.

`check_batch(batch, config, special_tokens)` raises `InvariantError` naming the first
violated invariant. It checks the layout only (which position is what, lengths, masks,
position ids, brackets, dtypes); it cannot know which items dropout removed, so a sample's
first rotary id is required to be 0 only when every dropout probability is 0 (a dropped
leading image advances the rotary counter before anything is laid out).
"""

from __future__ import annotations

import math

import torch

from ..errors import InvariantError
from ..media.pixels import normalize_pixels, raw_pixel_problem
from .config import PackingConfig, SpecialTokens

INT_KEYS = (
    "packed_text_ids",
    "packed_text_indexes",
    "packed_position_ids",
    "packed_vit_token_indexes",
    "packed_vit_position_ids",
    "vit_token_seqlens",
    "packed_vae_token_indexes",
    "packed_latent_position_ids",
    "mse_loss_indexes",
    "ce_loss_indexes",
    "packed_label_ids",
)
FLOAT_KEYS = ("packed_vit_tokens", "ce_loss_weights", "packed_timesteps", "padded_images")
GROUPS = {
    "vae": ("padded_images", "patchified_vae_latent_shapes", "packed_latent_position_ids", "packed_vae_token_indexes"),
    "vit": ("packed_vit_tokens", "packed_vit_position_ids", "packed_vit_token_indexes", "vit_token_seqlens"),
    "timesteps": ("packed_timesteps", "mse_loss_indexes"),
    "ce": ("packed_label_ids", "ce_loss_indexes", "ce_loss_weights"),
}
INDEX_KEYS = (
    "packed_text_indexes",
    "packed_vit_token_indexes",
    "packed_vae_token_indexes",
    "mse_loss_indexes",
    "ce_loss_indexes",
)


def _require(condition, message: str) -> None:
    if not condition:
        raise InvariantError(message)


def _list(batch: dict, key: str) -> list:
    value = batch.get(key)
    return [] if value is None else value.tolist()


def check_batch(batch: dict, config: PackingConfig, special_tokens: SpecialTokens) -> None:
    """Raise `InvariantError` on the first invariant that `batch` violates."""
    if config.pixel_format == "uint8":  # the bytes' side tensors, then the float batch they make
        _require(raw_pixel_problem(batch) is None, str(raw_pixel_problem(batch)))
        batch = normalize_pixels(dict(batch))
    _check_keys(batch, config)
    _check_dtypes(batch)
    for key in INDEX_KEYS:
        _check_increasing(batch, key)
    _check_partition(batch)
    _check_lengths(batch)
    _check_losses(batch)
    _check_sample_lens(batch, config)
    if config.use_flex:
        _check_splits(batch, config)
    else:
        _check_masks(batch)
    images = _image_spans(batch)
    _check_brackets(batch, images, special_tokens)
    _check_position_ids(batch, images, config)
    _check_timesteps(batch)
    _check_position_tables(batch, config)
    _check_padded_images(batch, config)


def _check_keys(batch: dict, config: PackingConfig) -> None:
    for key in (
        "sequence_length",
        "sample_lens",
        "packed_text_ids",
        "packed_text_indexes",
        "packed_position_ids",
        "batch_data_indexes",
    ):
        _require(key in batch, f"missing key {key!r}")
    _require(isinstance(batch["sequence_length"], int), "sequence_length is not an int")
    attention = ("split_lens", "attn_modes") if config.use_flex else ("nested_attention_masks",)
    other = ("nested_attention_masks",) if config.use_flex else ("split_lens", "attn_modes")
    for key in attention:
        _require(key in batch, f"use_flex={config.use_flex} but {key!r} is missing")
    for key in other:
        _require(key not in batch, f"use_flex={config.use_flex} but {key!r} is present")
    for name, keys in GROUPS.items():
        present = [key in batch for key in keys]
        _require(all(present) or not any(present), f"{name} keys only partly present: {dict(zip(keys, present))}")


def _check_dtypes(batch: dict) -> None:
    for keys, dtype in ((INT_KEYS, torch.int64), (FLOAT_KEYS, torch.float32)):
        for key in keys:
            if key in batch:
                _require(
                    isinstance(batch[key], torch.Tensor) and batch[key].dtype == dtype,
                    f"{key} must be a {dtype} tensor, got {getattr(batch[key], 'dtype', type(batch[key]))}",
                )
    for i, mask in enumerate(batch.get("nested_attention_masks", [])):
        _require(mask.dtype == torch.float32, f"nested_attention_masks[{i}] is {mask.dtype}, not float32")


def _check_increasing(batch: dict, key: str) -> None:
    values = _list(batch, key)
    for i in range(1, len(values)):
        _require(values[i] > values[i - 1], f"{key} not strictly increasing at {i}: {values[i - 1]} then {values[i]}")


def _check_partition(batch: dict) -> None:
    length = batch["sequence_length"]
    owner: dict[int, str] = {}
    for key in ("packed_text_indexes", "packed_vit_token_indexes", "packed_vae_token_indexes"):
        for position in _list(batch, key):
            _require(0 <= position < length, f"{key} holds {position}, outside 0..{length - 1}")
            _require(position not in owner, f"position {position} is in both {owner.get(position)} and {key}")
            owner[position] = key
    missing = sorted(set(range(length)) - set(owner))
    _require(not missing, f"positions {missing[:10]} are neither text, ViT nor VAE")


def _check_lengths(batch: dict) -> None:
    def same(*pairs):
        sizes = {name: size for name, size in pairs}
        _require(len(set(sizes.values())) == 1, f"lengths disagree: {sizes}")

    same(("packed_text_ids", len(batch["packed_text_ids"])), ("packed_text_indexes", len(batch["packed_text_indexes"])))
    same(("packed_position_ids", len(batch["packed_position_ids"])), ("sequence_length", batch["sequence_length"]))
    if "ce_loss_indexes" in batch:
        same(*((key, len(batch[key])) for key in GROUPS["ce"]))
    if "packed_vit_tokens" in batch:
        same(
            ("packed_vit_tokens rows", batch["packed_vit_tokens"].shape[0]),
            ("packed_vit_token_indexes", len(batch["packed_vit_token_indexes"])),
            ("sum(vit_token_seqlens)", int(batch["vit_token_seqlens"].sum())),
            ("packed_vit_position_ids", len(batch["packed_vit_position_ids"])),
        )
    vae = len(batch.get("packed_vae_token_indexes", []))
    if "packed_vae_token_indexes" in batch:
        same(
            ("packed_vae_token_indexes", vae),
            ("sum(h*w)", sum(h * w for h, w in batch["patchified_vae_latent_shapes"])),
            ("packed_latent_position_ids", len(batch["packed_latent_position_ids"])),
        )
    same(("packed_timesteps", len(batch.get("packed_timesteps", []))), ("packed_vae_token_indexes", vae))


def _check_losses(batch: dict) -> None:
    text = set(_list(batch, "packed_text_indexes"))
    outside = sorted(set(_list(batch, "ce_loss_indexes")) - text)
    _require(not outside, f"ce_loss_indexes {outside[:10]} are not text positions")
    vae = _list(batch, "packed_vae_token_indexes")
    timesteps = _list(batch, "packed_timesteps")
    finite = [position for position, t in zip(vae, timesteps) if math.isfinite(t)]
    _require(
        _list(batch, "mse_loss_indexes") == finite,
        "mse_loss_indexes are not exactly the VAE positions with a finite timestep",
    )


def _check_sample_lens(batch: dict, config: PackingConfig) -> None:
    lens, length = list(batch["sample_lens"]), batch["sequence_length"]
    if config.use_flex:
        _require(
            lens and lens[-1] == config.max_num_tokens - length,
            f"the last sample_lens entry must be the padding {config.max_num_tokens - length}, got {lens[-1:]}",
        )
        _require(sum(lens) == config.max_num_tokens, f"sum(sample_lens)={sum(lens)} != max_num_tokens")
        lens = lens[:-1]
    _require(sum(lens) == length, f"sum(sample_lens)={sum(lens)} != sequence_length={length}")
    _require(all(n > 0 for n in lens), f"empty sample in sample_lens={lens}")
    _require(
        len(batch["batch_data_indexes"]) == len(lens),
        f"{len(batch['batch_data_indexes'])} batch_data_indexes for {len(lens)} samples",
    )


def _sample_starts(batch: dict, config: PackingConfig) -> list[int]:
    lens = batch["sample_lens"][:-1] if config.use_flex else batch["sample_lens"]
    starts, start = [], 0
    for n in lens:
        starts.append(start)
        start += n
    return starts


def _check_splits(batch: dict, config: PackingConfig) -> None:
    splits, modes = list(batch["split_lens"]), list(batch["attn_modes"])
    _require(len(splits) == len(modes), f"{len(splits)} split_lens for {len(modes)} attn_modes")
    _require(sum(splits) == config.max_num_tokens, f"sum(split_lens)={sum(splits)} != max_num_tokens")
    _require(
        splits[-1] == config.max_num_tokens - batch["sequence_length"] and modes[-1] == "causal",
        "the last split must be the causal padding split",
    )
    _require(set(modes) <= {"causal", "full", "noise"}, f"unknown attention modes in {modes}")
    _require(all(n > 0 for n in splits[:-1]), f"empty split in split_lens={splits}")
    bounds, start = set(), 0
    for n in splits:
        bounds.add(start)
        start += n
    crossing = sorted(set(_sample_starts(batch, config)) - bounds)
    _require(not crossing, f"samples starting at {crossing} begin inside a split")


def _check_masks(batch: dict) -> None:
    masks, lens = batch["nested_attention_masks"], batch["sample_lens"]
    _require(len(masks) == len(lens), f"{len(masks)} nested_attention_masks for {len(lens)} samples")
    for i, (mask, n) in enumerate(zip(masks, lens)):
        _require(tuple(mask.shape) == (n, n), f"nested_attention_masks[{i}] is {tuple(mask.shape)}, not ({n}, {n})")
        allowed = mask == 0
        only_two_values = bool((allowed | (mask == float("-inf"))).all())
        _require(only_two_values, f"nested_attention_masks[{i}] holds values besides 0/-inf")
        _require(bool(allowed.diagonal().all()), f"nested_attention_masks[{i}] masks a position from itself")


def _image_spans(batch: dict) -> list[tuple[str, int, int]]:
    """`(kind, first, last)` token positions of every image, ViT then VAE, in pack order."""
    spans = []
    for kind, key, sizes in (
        ("ViT", "packed_vit_token_indexes", _list(batch, "vit_token_seqlens")),
        ("VAE", "packed_vae_token_indexes", [h * w for h, w in batch.get("patchified_vae_latent_shapes", [])]),
    ):
        positions, offset = _list(batch, key), 0
        for n in sizes:
            run = positions[offset : offset + n]
            _require(n > 0 and run == list(range(run[0], run[0] + n)), f"{kind} image at {run[:1]} is not contiguous")
            spans.append((kind, run[0], run[-1]))
            offset += n
    return spans


def _check_brackets(batch: dict, images, tokens: SpecialTokens) -> None:
    text = dict(zip(_list(batch, "packed_text_indexes"), _list(batch, "packed_text_ids")))
    for kind, first, last in images:
        _require(
            text.get(first - 1) == tokens.start_of_image,
            f"{kind} image at {first}..{last}: position {first - 1} is not start_of_image",
        )
        _require(
            text.get(last + 1) == tokens.end_of_image,
            f"{kind} image at {first}..{last}: position {last + 1} is not end_of_image",
        )


def _check_position_ids(batch: dict, images, config: PackingConfig) -> None:
    ids = _list(batch, "packed_position_ids")
    no_dropout = not (config.text_cond_dropout_prob or config.vit_cond_dropout_prob or config.vae_cond_dropout_prob)
    starts = _sample_starts(batch, config)
    for start, end in zip(starts, [*starts[1:], batch["sequence_length"]]):
        _require(
            ids[start] >= 0 and (ids[start] == 0 or not no_dropout),
            f"rotary ids do not restart at 0 at sample start {start}: {ids[start]}",
        )
        for i in range(start + 1, end):
            _require(ids[i] >= ids[i - 1], f"rotary ids decrease inside a sample at position {i}")
    for kind, first, last in images:
        values = set(ids[first - 1 : last + 2])
        _require(len(values) == 1, f"{kind} image at {first}..{last} has several rotary ids {sorted(values)}")


def _check_timesteps(batch: dict) -> None:
    timesteps, offset = _list(batch, "packed_timesteps"), 0
    for i, (h, w) in enumerate(batch.get("patchified_vae_latent_shapes", [])):
        values = set(timesteps[offset : offset + h * w])
        _require(len(values) == 1, f"VAE image {i} has {len(values)} different timesteps, not one")
        offset += h * w


def _check_position_tables(batch: dict, config: PackingConfig) -> None:
    for key, side in (
        ("packed_vit_position_ids", config.max_num_patch_per_side),
        ("packed_latent_position_ids", config.max_latent_size),
    ):
        values = _list(batch, key)
        _require(all(0 <= v < side * side for v in values), f"{key} outside 0..{side * side - 1}")


def _check_padded_images(batch: dict, config: PackingConfig) -> None:
    if "padded_images" not in batch:
        return
    images, shapes, d = batch["padded_images"], batch["patchified_vae_latent_shapes"], config.vae_image_downsample
    _require(
        images.dim() == 4 and images.shape[0] == len(shapes),
        f"padded_images {tuple(images.shape)} for {len(shapes)} VAE images",
    )
    for i, (h, w) in enumerate(shapes):
        _require(
            images.shape[2] >= d * h and images.shape[3] >= d * w,
            f"padded_images {tuple(images.shape[2:])} smaller than VAE image {i} ({d * h}x{d * w})",
        )
