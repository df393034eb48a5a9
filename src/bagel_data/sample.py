"""The sample a family yields: the reference's dict schema, built in one place.

A sample is a plan of text / ViT-image / VAE-image items plus the token ids and image
tensors those items consume, in plan order. `num_tokens` counts text ids and image tokens;
the packer adds two more per item for the begin/end tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, TypedDict

from .instruments import seam
from .media.convert import materialize
from .media.images import image_tokens

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
        self.num_tokens += image_tokens(tensor.shape[1], tensor.shape[2], stride)

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
    """Tokens a sample takes in a pack when none of its items is known to drop: its
    `full_length`. A drawn sample's packed length is its envelope's (`Draw.length`)."""
    return full_length(sample)


@dataclasses.dataclass(frozen=True)
class Dropout:
    """Which CFG items of a sample were decided to drop when it was drawn, and the packed
    tokens that saves (`packing/dropout.py`)."""

    items: frozenset[int] = frozenset()
    tokens: int = 0


@dataclasses.dataclass(eq=False)
class Draw:
    """A sample drawn from a group, in its envelope: where it came from, the randomness it
    was made with and what dropout decided. The reference's dict (`sample`) is the payload
    the model sees. Mutable on purpose: a sample restored from a checkpoint (by its cursor)
    is rebuilt into its envelope, and best-fit counts the packs it waited; identity, not
    value, tells two draws apart (`packing/rebuild.py`)."""

    group: int
    cursor: tuple
    # None only for a draw restored from a checkpoint (it holds cursors, not samples) until
    # the overflow rebuilds it (`packing/overflow.py`), before any other use.
    sample: dict | None = None
    rng_state: dict | None = None  # compat="bagel": the shared stream before the sample's row
    dropped: Dropout | None = None  # None: not decided at the draw (compat, or not rebuilt yet)
    waited: int = 0  # best-fit: packs this oldest sample found no room beside the mandatory ones
    rebuilt: Any = None  # resume: the queue rebuilding it on other threads; never saved

    @property
    def row_key(self) -> tuple | None:
        """The row's address the family keys its randomness by (None for stand-in groups)."""
        return None if self.sample is None else self.sample.get("row_key")

    @property
    def full_length(self) -> int:
        assert self.sample is not None  # rebuilt before any use
        return full_length(self.sample)

    @property
    def length(self) -> int:
        """Tokens it takes in a pack: its full length less what dropout decided to drop."""
        return self.full_length - (0 if self.dropped is None else self.dropped.tokens)
