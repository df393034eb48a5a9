"""A family's samples from its rows: each row's sample built and tagged with where it came
from, a phase's work items walked, and one row rebuilt exactly (same row, same draws).

`DistributedIterableDataset` (`families/base.py`) streams and rebuilds through these; a
family gives only `_unit_samples`, the good rows of one unit.
"""

from __future__ import annotations

from typing import Any

from ..errors import BagelDataError, EmptyWorkerError, ResumeError, RowDropped, SkipLog, SkipReason
from ..sharding import WorkerShard
from .positions import tagged

# `dataset` / `family`: a DistributedIterableDataset (families/base.py), which calls these.
Family = Any


def guarded(log: SkipLog, location: str, build, *args):
    """`build(*args)`, or None with a counted ROW_FAILED skip when it raises anything but a
    library error: no exception of one row escapes to the training loop."""
    try:
        return build(*args)
    except RowDropped as exc:  # a row a family's rules leave out: counted under its own reason
        reason = exc.reason if isinstance(exc.reason, SkipReason) else SkipReason.ROW_FAILED
        log.skip(reason, location, exc.detail[:500])
        return None
    except (BagelDataError, MemoryError):
        raise
    except Exception as exc:
        log.skip(SkipReason.ROW_FAILED, location, f"{type(exc).__name__}: {exc}"[:500])
        return None


def built(family: Family, builder, shard: WorkerShard, position, row_key, rng_state) -> dict:
    """The sample of a row's builder, with its `data_indexes`, `row_key` and (compat) the
    stream's state before the row's draws."""
    sample = builder.build(tagged(family, shard, family.data_index(position)), shard.worker_id, family.dataset_name)
    sample["row_key"] = row_key  # where it came from, whatever the topology
    if family.policy.reference:
        sample["compat_rng_state"] = rng_state  # the stream before this row's draws
    return sample


def phase_samples(family: Family, shard: WorkerShard, items, log: SkipLog):
    """Yield `(position, sample)` for the work items of one phase (`walk.phase_items`)."""
    for item in items:
        if item.single:  # a row an old topology had buffered (elastic restart)
            before = log.total()
            sample = sample_at_row(family, shard, item.row_key, [item.index], log)
            if sample is None and log.total() > before:
                continue  # e.g. its media is gone since: a counted skip
            if sample is None:  # it was a good sample when the old worker buffered it
                raise ResumeError(
                    f"{family.dataset_name}: the buffered row {item.row_key} (unit, pass, row) no longer gives "
                    "a sample; the data changed since the checkpoint"
                )
            yield [item.index], sample
            continue
        for row, builder, rng_state in family._unit_samples(item.unit_id, item.pass_index, item.row_start, log):
            position = [item.index, *row]
            yield position, built(family, builder, shard, position, (item.unit_id, item.pass_index, *row), rng_state)


def sample_at_row(family: Family, shard: WorkerShard, row_key, position, log: SkipLog):
    """The sample of the row at `row_key` alone, or None when it gives none."""
    unit_id, pass_index, *row = row_key
    for found, builder, rng_state in family._unit_samples(unit_id, pass_index, tuple(row), log, single=True):
        if list(found) == row:
            return built(family, builder, shard, position, tuple(row_key), rng_state)
    return None


def rebuilt(family: Family, cursor: tuple[int, ...], rng_state: dict | None, log: SkipLog):
    """The sample at `cursor` rebuilt (`sample_at`): its reads served by `prefetch_rows`, not
    the stream's; in compat mode replayed from the stream's state before its row."""
    here = family.reads.thread_state()
    here.rebuilding = True
    try:
        if not family.policy.reference:
            return sample_at_row(family, family.worker_shard(), family.row_key(cursor), list(cursor[1:]), log)
        if rng_state is None:
            raise ResumeError(
                f'{family.dataset_name}: compat="bagel" rebuilds a sample from the stream state before its row; '
                f"none was given for cursor {list(cursor)}"
            )
        with family.policy.stream.replaying(rng_state):
            return sample_at_row(family, family.worker_shard(), family.row_key(cursor), list(cursor[1:]), log)
    finally:
        here.rebuilding = False


def empty_pass_error(family: Family, shard: WorkerShard) -> BagelDataError:
    """A whole pass over this worker's units gave neither a row nor a skip: looping again
    would spin forever, so say which units are empty and what to do."""
    units = [family.units.label(int(i)) for i in shard.unit_ids]
    shown = ", ".join(units[:5]) + (f" and {len(units) - 5} more" if len(units) > 5 else "")
    return EmptyWorkerError(
        f"{family.dataset_name}: rank {shard.rank} worker {shard.worker_id} read a whole pass over its "
        f"{len(units)} unit(s) ({shown}) and found no rows: they are empty (zero rows or empty row groups). "
        "Remove the empty files, or give this group more non-empty units than ranks x workers; "
        "`bagel-data validate` lists the empty units."
    )
