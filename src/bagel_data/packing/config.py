"""The packer's settings: token budgets, dropout, image geometry, and the special token ids."""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError
from ..schema import check_packing


@dataclasses.dataclass(frozen=True)
class PackingConfig:
    """Token budgets and per-item settings of the packer (the reference's DataConfig part)."""

    expected_num_tokens: int = 32768
    max_num_tokens_per_sample: int = 16384
    max_num_tokens: int = 36864
    prefer_buffer_before: int = 16384
    max_buffer_size: int = 50
    interpolate_pos: bool = False
    use_flex: bool = False
    text_cond_dropout_prob: float = 0.1
    vit_cond_dropout_prob: float = 0.4
    vae_cond_dropout_prob: float = 0.1
    vae_image_downsample: int = 16
    max_latent_size: int = 32
    vit_patch_size: int = 14
    max_num_patch_per_side: int = 70
    # Opt-in modes (packing/strategies.py); the defaults are the reference's behaviour.
    mix_by: str = "samples"  # or "tokens": weights are target shares of packed tokens
    pack_strategy: str = "greedy"  # or "best_fit": fill each pack from the buffer before it closes
    # "uint8": `padded_images` / `packed_vit_tokens` leave as bytes plus their mean / std;
    # `normalize_pixels` (media/pixels.py) gives the float32 tensors, bit for bit.
    pixel_format: str = "float32"

    def __post_init__(self) -> None:
        # Each value by type and range (the schema's PACKING_FIELDS); pairs are in check().
        check_packing(dataclasses.asdict(self))

    def check(self) -> None:
        """The budgets against each other (not at construction: tests build partial configs)."""
        for key in ("max_num_tokens_per_sample", "expected_num_tokens"):
            if getattr(self, key) > self.max_num_tokens:
                raise ConfigError(
                    key,
                    getattr(self, key),
                    f"must not exceed max_num_tokens={self.max_num_tokens}; lower it or raise max_num_tokens",
                )


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
    bos_token_id: int
    eos_token_id: int
    start_of_image: int
    end_of_image: int
