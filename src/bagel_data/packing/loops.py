"""The packing loops, one per `pack_strategy`, picked from `PACK_LOOPS` once per iteration.

Each is a generator of batches over a `Placer` (`packing/placer.py`). Every state change
happens before a `yield`, so a checkpoint taken while a batch is out describes exactly
what comes next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .placer import Placer


def greedy_packs(placer: Placer) -> Iterator[dict]:
    """`pack_strategy="greedy"`: a pack goes out once it reaches `expected_num_tokens`, or
    when the next sample does not fit and cannot wait in the buffer.

    One loop on purpose: it follows the reference's control flow branch for branch, so the
    random draws come in the reference's order (tests/conformance pin it)."""
    cfg = placer.config
    pack = placer.new_pack()
    while True:
        if pack.is_empty():
            placer.open_pack(pack)
        taken = placer.next_item(pack)
        if taken is None:  # a counted skip
            continue
        draw, from_buffer = taken
        if pack.curr + draw.length > cfg.max_num_tokens:
            if placer.has_room() and not from_buffer:
                placer.overflow.hold(draw)
            else:
                batch = placer.emit(pack)
                pack = placer.new_pack()
                placer.after_emit(draw)
                yield batch
            continue
        placer.put(pack, draw)
        if pack.curr >= cfg.expected_num_tokens:
            batch = placer.emit(pack)
            pack = placer.new_pack()
            yield batch


def best_fit_packs(placer: Placer) -> Iterator[dict]:
    """`pack_strategy="best_fit"`: each pack is filled from the buffer's best subset for the
    room left (`Placer.fill_best`), then goes out."""
    pack = placer.new_pack()
    while True:
        if pack.is_empty():
            placer.open_pack(pack)
        placer.fill_best(pack)
        if pack.is_empty():  # every chosen sample lost all its items to dropout (counted)
            continue
        batch = placer.emit(pack)
        pack = placer.new_pack()
        yield batch


PACK_LOOPS: dict[str, Callable[[Placer], Iterator[dict]]] = {"greedy": greedy_packs, "best_fit": best_fit_packs}
