"""The order a group's rows are drawn in, as a checkpoint records it.

In the default mode's walk by rows (`families/row_share.py`) a cursor `(round, draw)` names
a row only under the order it was taken in, and that order depends on two sizes besides the
seeds and row counts: the shuffle window's rows (`shuffle_buffer_size`) and the fewest
pieces a window holds (`open_pieces`). A checkpoint records both for each group that walks
by rows. A resume under another `shuffle_buffer_size` is a ResumeError naming both values:
its cursors would name other rows, drawing some twice and some never, without a word. The
piece count is the library's and follows the checkpoint: a run keeps the rule it started
with, and a checkpoint from before this record (windows of `shuffle_buffer_size` rows,
whatever their pieces) resumes under that older rule (`LEGACY_OPEN_PIECES`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..errors import ResumeError, shown

# The fewest pieces of a window before the record existed: windows were cut by rows alone.
LEGACY_OPEN_PIECES = 1
_KEYS = ("shuffle_buffer_size", "open_pieces")


class OrderedGroup(Protocol):
    name: str

    def row_order(self) -> dict | None: ...
    def set_row_order(self, order: dict) -> None: ...


def saved_orders(saved: Mapping, names: Sequence[str]) -> list[dict | None] | None:
    """The `orders` a checkpoint records for each group, checked; None where it has none
    (older checkpoints)."""
    orders = saved.get("orders")
    if orders is None:
        return None
    if not isinstance(orders, Mapping) or sorted(orders) != sorted(names):
        raise ResumeError(f"checkpoint field orders = {shown(orders, 120)}: one entry (or null) per group {names}")
    for name in names:
        order = orders[name]
        if order is None:
            continue
        if not isinstance(order, Mapping) or sorted(order) != sorted(_KEYS) or not _sizes(order):
            raise ResumeError(
                f"checkpoint field orders.{name} = {shown(order, 120)}: {{shuffle_buffer_size: int >= 0, "
                "open_pieces: int >= 1}} or null"
            )
    return [None if orders[name] is None else dict(orders[name]) for name in names]


def follow_orders(groups: Sequence[OrderedGroup], saved: Mapping) -> None:
    """Check the checkpoint's orders against the groups' and set each group to walk in the
    order the checkpoint's cursors were taken in."""
    names = [group.name for group in groups]
    orders = saved_orders(saved, names)
    for index, group in enumerate(groups):
        current = group.row_order()
        if current is None:
            continue  # a walk by units: its cursors are checked by their own rules
        order = None if orders is None else orders[index]
        if order is None:  # before the record, or the group did not walk by rows then
            group.set_row_order({**current, "open_pieces": LEGACY_OPEN_PIECES})
            continue
        if order["shuffle_buffer_size"] != current["shuffle_buffer_size"]:
            raise ResumeError(
                f"{group.name}: the checkpoint was taken with shuffle_buffer_size {order['shuffle_buffer_size']}, "
                f"this pipeline has {current['shuffle_buffer_size']}; its positions would name other rows (some "
                f"drawn twice, some never). Resume with shuffle_buffer_size: {order['shuffle_buffer_size']}, or "
                "restart the stream afresh without this checkpoint"
            )
        group.set_row_order(order)


def group_orders(groups: Sequence[OrderedGroup]) -> dict[str, dict | None]:
    """What a checkpoint records: each group's order now."""
    return {group.name: group.row_order() for group in groups}


def _sizes(order: Mapping) -> bool:
    return _count(order["shuffle_buffer_size"]) and _count(order["open_pieces"]) and order["open_pieces"] >= 1


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
