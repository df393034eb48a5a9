"""Hand-built samples for packer tests: no files, no tokenizer, random tensors from a seed.

A sample is described by a list of items (`text_item`, `vit_item`, `vae_item`) and turned
into the sample dict of `bagel_data.sample` (SPEC section 4) by `make_sample`:

    sample = make_sample([text_item([5, 6], loss=True), vae_item(2, 3, loss=True)], config)

Image sizes are given in *tokens per side*: `vit_item(h, w)` becomes a `3 x h*p x w*p`
tensor (`p = config.vit_patch_size`), `vae_item(h, w)` a `3 x h*d x w*d` tensor
(`d = config.vae_image_downsample`), so the image contributes `h * w` to `num_tokens`, as
`H * W // stride**2` of the transform that made it would.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from bagel_data.packing.config import PackingConfig, SpecialTokens
from bagel_data.sample import sample_length

TOKENS = SpecialTokens(bos_token_id=151644, eos_token_id=151645, start_of_image=151652, end_of_image=151653)
TOKENS_DICT = dataclasses.asdict(TOKENS)


@dataclasses.dataclass
class Item:
    """One plan item before it is materialised: its plan dict and what it consumes."""

    plan: dict
    ids: list[int] | None = None  # text items
    size: tuple[int, int] | None = None  # image items, tokens per side (h, w)
    tensor: torch.Tensor | None = None  # image items: an explicit tensor instead of a random one


def _plan(kind: str, *, loss: bool, cfg: bool, special_token_label: int | None) -> dict:
    return {
        "type": kind,
        "enable_cfg": int(cfg),
        "loss": int(loss),
        "special_token_loss": int(special_token_label is not None),
        "special_token_label": special_token_label,
    }


def text_item(ids, loss: bool = False, cfg: bool = False, special_token_label: int | None = None) -> Item:
    return Item(_plan("text", loss=loss, cfg=cfg, special_token_label=special_token_label), ids=list(ids))


def vit_item(h: int, w: int, cfg: bool = False, special_token_label: int | None = None, tensor=None) -> Item:
    return Item(
        _plan("vit_image", loss=False, cfg=cfg, special_token_label=special_token_label), size=(h, w), tensor=tensor
    )


def vae_item(
    h: int,
    w: int,
    loss: bool,
    frame_delta: int | None = None,
    split_start: bool = True,
    split_end: bool = True,
    cfg: bool = False,
    special_token_label: int | None = None,
    tensor=None,
) -> Item:
    plan = _plan("vae_image", loss=loss, cfg=cfg, special_token_label=special_token_label)
    if not split_start:
        plan["split_start"] = False
    if not split_end:
        plan["split_end"] = False
    if frame_delta is not None:
        plan["frame_delta"] = frame_delta
    return Item(plan, size=(h, w), tensor=tensor)


def video_items(h: int, w: int, frame_indexes: list[int], loss: bool = True) -> list[Item]:
    """VAE frames as one split: split_start on the first, split_end on the last, and a
    `frame_delta` (to the next frame's index) on every frame but the last."""
    n = len(frame_indexes)
    return [
        vae_item(
            h,
            w,
            loss=loss,
            frame_delta=frame_indexes[i + 1] - frame_indexes[i] if i < n - 1 else None,
            split_start=i == 0,
            split_end=i == n - 1,
        )
        for i in range(n)
    ]


def make_sample(
    items: list[Item],
    config: PackingConfig = PackingConfig(),
    generator: torch.Generator | None = None,
    *,
    index: Any = 0,
    worker_id: int = 0,
    dataset_name: str = "synthetic",
) -> dict:
    """The sample dict of SPEC section 4 for these items; image tensors drawn from `generator`."""
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    image_tensor_list, text_ids_list, sequence_plan = [], [], []
    num_tokens = 0
    for item in items:
        sequence_plan.append(dict(item.plan))
        if item.plan["type"] == "text":
            text_ids_list.append(list(item.ids))
            num_tokens += len(item.ids)
            continue
        unit = config.vit_patch_size if item.plan["type"] == "vit_image" else config.vae_image_downsample
        h, w = item.size
        tensor = item.tensor
        if tensor is None:
            tensor = torch.randn((3, h * unit, w * unit), generator=generator, dtype=torch.float32)
        image_tensor_list.append(tensor)
        num_tokens += tensor.shape[1] * tensor.shape[2] // unit**2
    return dict(
        image_tensor_list=image_tensor_list,
        text_ids_list=text_ids_list,
        sequence_plan=sequence_plan,
        num_tokens=num_tokens,
        data_indexes={"data_indexes": index, "worker_id": worker_id, "dataset_name": dataset_name},
    )


def text_sample(length: int, index: Any = 0, dataset_name: str = "synthetic", loss: bool = True) -> dict:
    """A one-text-item sample whose packed length (`sample_length`) is exactly `length` (>= 2)."""
    assert length >= 2, "a text item takes at least its bos and eos tokens"
    ids = [1000 + (k % 97) for k in range(length - 2)]
    sample = make_sample([text_item(ids, loss=loss)], index=index, dataset_name=dataset_name)
    assert sample_length(sample) == length
    return sample
