"""The shape of every registered family: it holds its parts instead of inheriting them.

At most two project classes in its MRO (itself, and `DistributedIterableDataset`, the
reference's base that user code subclasses), no mixin, and at most 45 attributes. The count
is `dir(family)` minus `dir(torch.utils.data.IterableDataset)`: every name the project
defines on the class or its project bases (methods, properties, class attributes), none of
torch's or object's; instance attributes (the parts: `units`, `reads`, `media`, ...) are
not counted.
"""

from __future__ import annotations

import pickle

import pytest
import torch

from bagel_data.families.base import DistributedIterableDataset
from bagel_data.families.interleaved import InterleavedIterableDataset
from bagel_data.families.registry import DATASET_REGISTRY
from bagel_data.media.images import ImageTransform
from helpers.builders import write_parquet

MAX_ATTRIBUTES = 45
FAMILIES = sorted(DATASET_REGISTRY.items())


def attribute_count(family: type) -> int:
    return len(set(dir(family)) - set(dir(torch.utils.data.IterableDataset)))


@pytest.mark.parametrize(("group", "family"), FAMILIES, ids=[group for group, _ in FAMILIES])
def test_a_family_has_two_project_classes_and_at_most_45_attributes(group, family):
    project = [cls for cls in family.__mro__ if cls.__module__.startswith("bagel_data")]
    assert project == [family, DistributedIterableDataset], f"{group}: {[cls.__name__ for cls in project]}"
    assert attribute_count(family) <= MAX_ATTRIBUTES, f"{group}: {attribute_count(family)} attributes"


def test_the_count_sees_a_mixin_s_names():
    """The count must be able to fail: a mixin's methods count as the family's."""

    class Mixin:
        def one(self): ...

        def two(self): ...

    class Mixed(Mixin, DATASET_REGISTRY["t2i_pretrain"]):
        pass

    assert attribute_count(Mixed) == attribute_count(DATASET_REGISTRY["t2i_pretrain"]) + 2


def test_the_interleaved_family_s_held_plan_builders_survive_a_pickle(tmp_path, tokenizer):
    """A spawned DataLoader worker gets a pickled family: its held parts go with it."""
    from bagel_data.families.interleaved import INTERLEAVED_SCHEMA

    text = {"type": "text", "text": "hello there", "supervised": True}
    write_parquet(
        tmp_path / "docs.parquet", [[{"segments": [text]}]], {"segments": INTERLEAVED_SCHEMA.field("segments").type}
    )
    family = InterleavedIterableDataset(
        "il", ImageTransform(64, 32, 16), tokenizer, data_dir_list=[str(tmp_path)], num_used_data=[1],
        num_workers=1, segment_defaults={"first_image": ["conditioned"], "later_images": ["conditioned"]},
    )  # fmt: skip
    again = pickle.loads(pickle.dumps(family))
    assert again.plan.family is again and again.plan.tokenizer is again.tokenizer
    (sample,) = [s for _, s in zip(range(1), again)]
    assert tokenizer.decode(sample["text_ids_list"][0]) == "hello there"
