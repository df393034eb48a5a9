"""Drawing from several workers' streams in turn, as a DataLoader and ranks in step do: what
the equal-draw tests of the walk by rows count (`tests/test_row_walk.py`, tars in
`tests/families/test_tar_rows.py`)."""

from __future__ import annotations

import collections

from helpers.golden import as_worker


def draw_in_turn(streams: list, draws_each: int) -> tuple[collections.Counter, list]:
    """Each stream `(worker, workers, dataset, samples)` draws `draws_each` times, in turn;
    (draws of each sample by `(unit, *row)`, the samples in the order drawn)."""
    counts: collections.Counter = collections.Counter()
    order = []
    for step in range(draws_each * len(streams)):
        worker, workers, _, stream = streams[step % len(streams)]
        with as_worker(worker, workers):
            _, sample = next(stream)
        unit, _, *row = sample["row_key"]
        counts[(unit, *row)] += 1
        order.append((unit, *row))
    return counts, order
