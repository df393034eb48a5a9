"""Save and load at several midpoints of a stream (as torchdata's `run_test_save_load_state`):
the batches after each cut, from a fresh dataset loaded with the checkpoint taken there,
are those of the uninterrupted stream."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def rows(batch: dict) -> list:
    """A batch by its samples: [[dataset name, data indexes], ...]."""
    return [[where["dataset_name"], where["data_indexes"]] for where in batch["batch_data_indexes"]]


def check_save_load_at(
    make: Callable[[], Any], cuts: Iterable[int], total: int, view: Callable[[dict], Any] = rows, json_trip: bool = True
) -> list[dict]:
    """For each cut, a stream of `make()` checkpointed after `cut` batches resumes in a fresh
    `make()` as the uninterrupted stream of `total` batches goes on (seen through `view`);
    `json_trip`: each checkpoint goes through JSON first (as a file would hold it). Returns
    the checkpoints taken."""
    full = [view(batch) for batch in itertools.islice(iter(make()), total)]
    assert len(full) == total, "the stream ended before the last cut: the test does not test it"
    taken = []
    for cut in cuts:
        first = make()
        head = [view(batch) for batch in itertools.islice(iter(first), cut)]
        state = copy.deepcopy(first.state_dict())
        taken.append(state)
        resumed = make()
        resumed.load_state_dict(json.loads(json.dumps(state)) if json_trip else state)
        tail = [view(batch) for batch in itertools.islice(iter(resumed), total - cut)]
        assert head + tail == full, f"resumed after {cut} batches, the stream differs"
    return taken


def same_rows(got: Sequence, want: Sequence) -> bool:
    return [list(map(list, batch)) for batch in got] == [list(map(list, batch)) for batch in want]
