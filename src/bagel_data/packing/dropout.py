"""Classifier-free-guidance dropout decided when a sample is drawn (the default mode).

The reference draws each CFG item's dropout from the packer's generator while it lays the
sample into a pack, after the sample was already counted and placed at its full length, so
a dropped item shrinks the pack afterwards: greedy and best-fit packs come out short of
what they were filled to, and `mix_by="tokens"` steers by lengths the pack never has.

Here a sample's dropout is decided the moment it is drawn from its group, from a generator
that belongs to that sample alone (keyed by its row, as the families' own per-sample
generators are: `UnitDataset.sample_rng`), so its true length is known before anything
looks at it, and the decision is the same however often, wherever and by whichever worker
the sample is rebuilt (a resumed buffer, an elastic restart). `decide_dropout` records it
in the sample (`cfg_dropped`, `cfg_dropped_tokens`); `sample_length` reads it and
`PackBuilder` obeys it. `compat="bagel"` never calls this: it keeps the reference's draws.
"""

from __future__ import annotations

import numpy as np

from ..sharding import stable_hash
from .config import PackingConfig

# Added to a sample's row key to give the sample's dropout generator: a stream of its own,
# apart from the one its family draws its captions, frames and edit steps from.
CFG_STREAM = 0xC0F6
_WORD = 0xFFFFFFFF


def any_dropout(config: PackingConfig) -> bool:
    return bool(config.text_cond_dropout_prob or config.vit_cond_dropout_prob or config.vae_cond_dropout_prob)


def dropout_rng(dataset, group_name: str, data_seed: int, cursor: tuple, sample: dict) -> np.random.Generator:
    """The sample's own dropout generator: from its family's per-sample generators when it
    has a row key (the same row gives the same decision whatever the topology), else keyed
    by the group, the seed and its cursor (stand-in groups of tests and tools)."""
    row_key = sample.get("row_key")
    if row_key is not None and hasattr(dataset, "sample_rng"):
        return dataset.sample_rng(*row_key, CFG_STREAM)
    key = [data_seed & _WORD, stable_hash(group_name), *(int(c) & _WORD for c in cursor), CFG_STREAM]
    return np.random.default_rng(np.random.SeedSequence(key))


def decide_dropout(sample: dict, config: PackingConfig, rng: np.random.Generator | None) -> None:
    """Mark which CFG items of `sample` are dropped and how many packed tokens that saves.

    The rules are the packer's: an item with `enable_cfg` drops with its kind's probability;
    a VAE frame inside a multi-frame split never drops (dropping one frame would break the
    split). One draw per droppable item, in plan order. `rng` None: no dropout configured."""
    dropped: list[int] = []
    saved = 0
    if rng is not None:
        texts, images = iter(sample["text_ids_list"]), iter(sample["image_tensor_list"])
        for index, item in enumerate(sample["sequence_plan"]):
            kind = item["type"]
            if kind == "text":
                size, probability, droppable = len(next(texts)) + 2, config.text_cond_dropout_prob, True
            else:
                image = next(images)
                vit = kind == "vit_image"
                stride = config.vit_patch_size if vit else config.vae_image_downsample
                size = (image.shape[1] // stride) * (image.shape[2] // stride) + 2
                probability = config.vit_cond_dropout_prob if vit else config.vae_cond_dropout_prob
                droppable = vit or (item.get("split_start", True) and item.get("split_end", True))
            if item["enable_cfg"] == 1 and droppable and rng.random() < probability:
                dropped.append(index)
                saved += size
    sample["cfg_dropped"] = frozenset(dropped)
    sample["cfg_dropped_tokens"] = saved
