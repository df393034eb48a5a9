"""The sample a family yields: the reference's dict schema, built in one place.

A sample is a plan of text / ViT-image / VAE-image items plus the token ids and image
tensors those items consume, in plan order. `num_tokens` counts text ids and image tokens;
the packer adds two more per item for the begin/end tokens.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from .instruments import seam
from .media.convert import materialize

ItemType = Literal["text", "vit_image", "vae_image"]


class PlanItem(TypedDict, total=False):
    type: ItemType
    enable_cfg: int
    loss: int
    special_token_loss: int
    special_token_label: int | None
    split_start: bool
    split_end: bool
    frame_delta: int


def plan_item(kind: ItemType, *, enable_cfg: bool, loss: bool) -> PlanItem:
    return {
        "type": kind,
        "enable_cfg": int(enable_cfg),
        "loss": int(loss),
        "special_token_loss": 0,
        "special_token_label": None,
    }


class SampleBuilder:
    """Accumulates plan items with their ids / tensors and the token count."""

    def __init__(self) -> None:
        self.sequence_plan: list[PlanItem] = []
        self.text_ids_list: list[list[int]] = []
        self.image_tensor_list: list[Any] = []  # float tensors, or PendingImages (media/convert.py)
        self.num_tokens = 0

    def add_text(self, ids: list[int], *, enable_cfg: bool, loss: bool) -> None:
        self.sequence_plan.append(plan_item("text", enable_cfg=enable_cfg, loss=loss))
        self.text_ids_list.append(ids)
        self.num_tokens += len(ids)

    def add_image(self, kind: ItemType, tensor, stride: int, *, enable_cfg: bool, loss: bool) -> None:
        """`tensor`: a float `(C, H, W)` tensor or a `PendingImage` (converted when packed)."""
        self.sequence_plan.append(plan_item(kind, enable_cfg=enable_cfg, loss=loss))
        self.image_tensor_list.append(tensor)
        self.num_tokens += tensor.shape[1] * tensor.shape[2] // stride**2

    def has_loss(self) -> bool:
        return any(item["loss"] for item in self.sequence_plan)

    @seam("build")
    def build(self, data_indexes: Any, worker_id: int, dataset_name: str) -> dict:
        return dict(
            image_tensor_list=self.image_tensor_list,
            text_ids_list=self.text_ids_list,
            sequence_plan=self.sequence_plan,
            num_tokens=self.num_tokens,
            data_indexes={"data_indexes": data_indexes, "worker_id": worker_id, "dataset_name": dataset_name},
        )


def with_tensors(sample: dict) -> dict:
    """`sample` with every `PendingImage` of its `image_tensor_list` converted to the float
    `(C, H, W)` tensor of docs/samples.md (what a family yields when iterated directly)."""
    sample["image_tensor_list"] = materialize(sample["image_tensor_list"])
    return sample


def full_length(sample: dict) -> int:
    """Tokens a sample takes in a pack with none of its CFG items dropped: its tokens plus a
    begin and end token per item (what the per-sample budget is checked against)."""
    return sample["num_tokens"] + 2 * len(sample["sequence_plan"])


def sample_length(sample: dict) -> int:
    """Tokens a sample takes in a pack: `full_length` less the CFG items the packer already
    decided to drop (`packing/dropout.py`; none decided yet: the full length)."""
    return full_length(sample) - sample.get("cfg_dropped_tokens", 0)
