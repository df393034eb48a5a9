"""Classifier-free-guidance dropout decided when a sample is drawn (the default mode).

The reference draws each CFG item's dropout from the packer's generator while it lays the
sample into a pack, after the sample was already counted and placed at its full length, so
a dropped item shrinks the pack afterwards: greedy and best-fit packs come out short of
what they were filled to, and `mix_by="tokens"` steers by lengths the pack never has.

Here a sample's dropout is decided the moment it is drawn from its group, from a generator
that belongs to that sample alone (keyed by its row, as the families' own per-sample
generators are: `UnitPlan.sample_rng`), so its true length is known before anything
looks at it, and the decision is the same however often, wherever and by whichever worker
the sample is rebuilt (a resumed buffer, an elastic restart). `decide_dropout` records it
in the sample (`cfg_dropped`, `cfg_dropped_tokens`); `sample_length` reads it and
`PackBuilder` obeys it. `compat="bagel"` never calls this: it keeps the reference's draws.
"""

from __future__ import annotations

from ..compat import CompatPolicy, RandomSource
from ..sample import Dropout, PlanItem
from .config import PackingConfig

# Added to a sample's row key to give the sample's dropout generator: a stream of its own,
# apart from the one its family draws its captions, frames and edit steps from.
CFG_STREAM = 0xC0F6


def any_dropout(config: PackingConfig) -> bool:
    return bool(config.text_cond_dropout_prob or config.vit_cond_dropout_prob or config.vae_cond_dropout_prob)


def is_droppable(item: PlanItem, policy: CompatPolicy) -> bool:
    """Whether CFG dropout may drop `item` at all: the one home of the rule that a VAE frame
    inside a multi-frame split never drops (dropping one frame would break the split),
    which compat="bagel" does not keep (`CompatPolicy.keeps_multi_frame_splits`;
    `PackBuilder` asks it too, for the draws it makes while packing)."""
    if item["type"] != "vae_image" or not policy.keeps_multi_frame_splits:
        return True
    return bool(item.get("split_start", True) and item.get("split_end", True))


def decide_dropout(sample: dict, config: PackingConfig, rng: RandomSource, policy: CompatPolicy) -> Dropout:
    """Which CFG items of `sample` drop and how many packed tokens that saves (the default
    mode's rule; `Drawer.decide` keeps it in the sample's envelope).

    An item with `enable_cfg` that `is_droppable` drops with its kind's probability; one
    draw per such item, in plan order."""
    dropped: list[int] = []
    saved = 0
    texts, images = iter(sample["text_ids_list"]), iter(sample["image_tensor_list"])
    for index, item in enumerate(sample["sequence_plan"]):
        kind = item["type"]
        if kind == "text":
            size, probability = len(next(texts)) + 2, config.text_cond_dropout_prob
        else:
            image = next(images)
            vit = kind == "vit_image"
            stride = config.vit_patch_size if vit else config.vae_image_downsample
            size = (image.shape[1] // stride) * (image.shape[2] // stride) + 2
            probability = config.vit_cond_dropout_prob if vit else config.vae_cond_dropout_prob
        if item["enable_cfg"] == 1 and is_droppable(item, policy) and rng.random() < probability:
            dropped.append(index)
            saved += size
    return Dropout(frozenset(dropped), saved)
