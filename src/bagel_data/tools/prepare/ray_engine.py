"""`--engine ray`: `convert_shard` mapped on Ray Data, one shard per task, results in order.

A local cluster is started (offline, no dashboard) unless `address` names a running one;
every node of such a cluster needs bagel-data installed and the input paths readable. The
shard files are written by the calling process, so the output folder need not be shared.
"""

from __future__ import annotations

import logging
import pickle
import socket
from collections.abc import Iterator

import numpy

from ...errors import ConfigError
from .common import Rows
from .shard_jobs import ShardJob, ShardResult, convert_shard

EXTRA_HINT = "install the extra: pip install 'bagel-data[ray]'"


def _import_ray():
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ConfigError("engine", "ray", f"Ray is not installed ({exc}); {EXTRA_HINT}") from None
    return ray


# Seconds to wait for a cluster's port to accept a connection: a dead address fails at
# once with one line, instead of Ray's own retries (minutes, and pages of warnings).
CONNECT_TIMEOUT_S = 10.0


def check_address(address: str | None, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """ConfigError unless something accepts a TCP connection at `address` (`host:port` or
    `ray://host:port`); None, "auto" and "local" are Ray's own lookups and pass."""
    if address is None or address in ("auto", "local"):
        return
    target = address.split("://", 1)[1] if "://" in address else address
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError("address", address, "write it as host:port (or ray://host:port), e.g. 10.0.0.5:6379")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            "address",
            address,
            f"no Ray cluster answers there ({reason}); start one (`ray start --head`) or fix --address",
        ) from None


def ray_mapper(address: str | None, num_cpus: int | None):
    ray = _import_ray()  # fails before any work when the extra is missing
    check_address(address)
    if num_cpus is not None and (num_cpus < 1 or address is not None):
        raise ConfigError("num_cpus", num_cpus, "a positive count, for the local cluster only (not with --address)")

    def map_shards(job: ShardJob, shards: list[tuple[int, Rows]]) -> Iterator[ShardResult]:
        if not shards:
            return
        started = not ray.is_initialized()
        if started:
            ray.init(
                address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                logging_level=logging.WARNING,
            )  # fmt: skip
            logging.getLogger("ray.data").setLevel(logging.ERROR)  # its plan and timing lines
        try:
            yield from _run(ray, job, shards)
        finally:
            if started:
                ray.shutdown()

    return map_shards


def _run(ray, job: ShardJob, shards: list[tuple[int, Rows]]) -> Iterator[ShardResult]:
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # results come back in shard order
    context.enable_progress_bars = False  # the command shows its own
    items = [{"shard": index, "rows": pickle.dumps(rows)} for index, rows in shards]

    def convert(batch: dict) -> dict:
        results = [
            pickle.dumps(convert_shard(pickle.loads(rows), int(index), job))
            for index, rows in zip(batch["shard"], batch["rows"])
        ]
        return {"result": numpy.array(results, dtype=object)}

    dataset = ray.data.from_items(items, override_num_blocks=len(items))
    dataset = dataset.map_batches(convert, batch_size=1, batch_format="numpy", num_cpus=1)
    for row in dataset.iter_rows():
        yield pickle.loads(row["result"])
