"""`DataConfig` (BAGEL's trainer) and `BagelDatasetConfig` (NeMo AutoModel's recipe).

Both are plain, mutable holders read by `PackedDataset` when it is constructed; nothing is
checked or copied until then, so attributes set after construction take effect.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping

from ..compat import check_compat
from ..config import load_mapping
from ..errors import ConfigError
from ..packing.config import PackingConfig


class DataConfig:
    """BAGEL's `DataConfig`: the group mapping plus the dropout and image-size settings.

    Positional order as in the reference. The trainer overwrites `vit_patch_size`,
    `max_num_patch_per_side`, `vae_image_downsample`, `max_latent_size` and the dropouts as
    attributes before building `PackedDataset`; that is supported.
    """

    def __init__(
        self,
        grouped_datasets,
        text_cond_dropout_prob: float = 0.1,
        vit_cond_dropout_prob: float = 0.4,
        vae_cond_dropout_prob: float = 0.1,
        vae_image_downsample: int = 16,
        max_latent_size: int = 32,
        vit_patch_size: int = 14,
        max_num_patch_per_side: int = 70,
        *,
        compat: str | None = None,
    ):
        self.grouped_datasets = grouped_datasets
        self.text_cond_dropout_prob = text_cond_dropout_prob
        self.vit_cond_dropout_prob = vit_cond_dropout_prob
        self.vae_cond_dropout_prob = vae_cond_dropout_prob
        self.vae_image_downsample = vae_image_downsample
        self.max_latent_size = max_latent_size
        self.vit_patch_size = vit_patch_size
        self.max_num_patch_per_side = max_num_patch_per_side
        self.compat = check_compat(compat)  # PackedDataset's default mode

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={value!r}" for key, value in vars(self).items() if key != "grouped_datasets")
        return f"DataConfig(groups={list(self.grouped_datasets or ())}, {fields})"


@dataclasses.dataclass
class BagelDatasetConfig:
    """NeMo AutoModel's declarative dataset config; `build()` gives a fresh `PackedDataset`.

    `grouped_datasets` / `dataset_info` are mappings, or give `grouped_datasets_path` /
    `dataset_info_path` (YAML or JSON; a path wins over the mapping). Relative paths inside a
    `dataset_info` file are taken relative to that file. The budgets, dropouts and sizes
    are those of `PackedDataset` / `DataConfig`. `compat="bagel"` asks for the reference's
    exact output.
    """

    grouped_datasets: Mapping | None = None
    grouped_datasets_path: str | None = None
    dataset_info: Mapping | None = None
    dataset_info_path: str | None = None
    # The packing settings, defaulted from PackingConfig (their one home).
    expected_num_tokens: int = PackingConfig.expected_num_tokens
    max_num_tokens_per_sample: int = PackingConfig.max_num_tokens_per_sample
    max_num_tokens: int = PackingConfig.max_num_tokens
    prefer_buffer_before: int = PackingConfig.prefer_buffer_before
    max_buffer_size: int = PackingConfig.max_buffer_size
    interpolate_pos: bool = PackingConfig.interpolate_pos
    use_flex: bool = PackingConfig.use_flex
    data_seed: int = 42
    text_cond_dropout_prob: float = PackingConfig.text_cond_dropout_prob
    vit_cond_dropout_prob: float = PackingConfig.vit_cond_dropout_prob
    vae_cond_dropout_prob: float = PackingConfig.vae_cond_dropout_prob
    vae_image_downsample: int = PackingConfig.vae_image_downsample
    max_latent_size: int = PackingConfig.max_latent_size
    vit_patch_size: int = PackingConfig.vit_patch_size
    max_num_patch_per_side: int = PackingConfig.max_num_patch_per_side
    compat: str | None = None

    def __post_init__(self):
        check_compat(self.compat)

    def resolved(self, name: str):
        """A private copy of `grouped_datasets` or `dataset_info` (a path is kept as a path
        for `dataset_info`, so relative paths inside the file stay relative to it)."""
        path, inline = getattr(self, f"{name}_path"), getattr(self, name)
        if path is None and inline is None:
            raise ConfigError(name, None, f"a BAGEL dataset config needs {name} or {name}_path")
        if path is not None:
            return path if name == "dataset_info" else load_mapping(path, f"{name}_path")[0]
        if not isinstance(inline, Mapping):
            raise ConfigError(name, type(inline).__name__, "must be a mapping (or give a *_path file)")
        return copy.deepcopy(dict(inline))

    def build(
        self,
        *,
        tokenizer,
        special_tokens,
        rank: int,
        world_size: int,
        num_workers: int,
        global_seed: int | None,
        data_status=None,
    ):
        """A fresh `PackedDataset` with `set_epoch(data_seed)` applied; this config is not
        changed. `global_seed` goes to the packer's own generator (see docs/coming_from.md);
        the caller's global random generators are left as they are."""
        from ..packing import packed_dataset  # looked up now, so it can be patched in tests

        grouped, info = self.resolved("grouped_datasets"), self.resolved("dataset_info")
        runtime = dataclasses.replace(
            self,
            grouped_datasets=grouped if isinstance(grouped, Mapping) else None,
            grouped_datasets_path=None,
            dataset_info=info if isinstance(info, Mapping) else None,
            dataset_info_path=None if isinstance(info, Mapping) else info,
        )
        dataset = packed_dataset.PackedDataset(
            data_config=runtime,
            tokenizer=tokenizer,
            special_tokens=special_tokens,
            local_rank=rank,
            world_size=world_size,
            num_workers=num_workers,
            expected_num_tokens=self.expected_num_tokens,
            max_num_tokens_per_sample=self.max_num_tokens_per_sample,
            max_num_tokens=self.max_num_tokens,
            prefer_buffer_before=self.prefer_buffer_before,
            max_buffer_size=self.max_buffer_size,
            interpolate_pos=self.interpolate_pos,
            use_flex=self.use_flex,
            data_status=data_status,
            dataset_info=info,
            global_seed=global_seed,
            compat=self.compat,
        )
        dataset.set_epoch(self.data_seed)
        return dataset
