"""One listing of a store folder per node: processes started together share it.

Every rank of a launch lists its data folders while it builds its dataset; with 8 ranks on
a node that is 8 listings of each folder (a request per 1,000 keys each, at the store's
round trip). The first process of the node to list a folder keeps the listing in the node's
cache (`node_cache.build_shared`: the others wait on its lock, then read it), and it serves
every process of the node for `TTL_S` seconds after it was taken, within one launch: the
cache key holds torchrun's run id (`TORCHELASTIC_RUN_ID`) where there is one, so a new
launch lists afresh. A folder changed on the store within `TTL_S` of a listing is seen as it
was by the processes of the node that list it in that window, as if they had started a
little earlier. `BAGEL_DATA_LISTING_TTL=0` lists in every process.

Local folders are never cached (listing them costs no round trip). Where the node cache is
off or cannot be written, each process lists for itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable

from ..errors import ConfigError
from . import node_cache

FOLDER = "listings"
TTL_S = 60.0
TTL_ENV = "BAGEL_DATA_LISTING_TTL"
RUN_ENV = "TORCHELASTIC_RUN_ID"
_FORMAT = 1
# What each process did for a listing (tests and benchmarks read these): `listed` (took it
# and shared it), `shared` (read another's), `unshared` (listed for itself: cache off or
# unwritable, or TTL 0).
COUNTS: dict[str, int] = {"listed": 0, "shared": 0, "unshared": 0}

Listing = list[tuple[str, int, int | None]]


def ttl_s() -> float:
    value = os.environ.get(TTL_ENV)
    if value is None:
        return TTL_S
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(
            TTL_ENV, value, "give the seconds a folder's listing serves the node, e.g. 60, or 0"
        ) from None
    return max(seconds, 0.0)


def shared_listing(folder: str, identity: object, list_now: Callable[[], Listing]) -> Listing:
    """`list_now()`'s entries of the store folder `folder`, taken by one process of the node
    and read by the others for `ttl_s()` seconds. `identity`: what else tells the store
    apart (its storage options, endpoint), part of the key."""
    ttl = ttl_s()
    cache = node_cache.shared_folder(FOLDER) if ttl > 0 else None
    if cache is None:
        COUNTS["unshared"] += 1
        return list_now()
    run = os.environ.get(RUN_ENV, "")
    key = hashlib.sha256(json.dumps([_FORMAT, folder, repr(identity), run]).encode()).hexdigest()[:32]
    took: list[Listing] = []
    failed: list[bool] = []

    def write(work: str) -> None:
        try:
            entries = list_now()
        except BaseException:
            failed.append(True)  # the store's error (a missing folder), not the cache's
            raise
        took.append(entries)
        with open(work, "w") as out:  # the time after the listing: its age counts from there
            json.dump({"folder": folder, "listed_at": time.time(), "entries": entries}, out)

    try:
        found = node_cache.build_shared(
            os.path.join(cache, key + ".json"), lambda path: _read(path, folder, ttl), write
        )
    except OSError as error:
        if failed or not (took or node_cache.cannot_write(error)):
            raise
        COUNTS["unshared"] += 1  # listed, but not kept (a full disk; older than the TTL at once)
        return took[0] if took else list_now()
    COUNTS["listed" if took else "shared"] += 1
    return found


def _read(path: str, folder: str, ttl: float) -> Listing | None:
    """The listing kept at `path` while it is younger than `ttl`; None when older, missing
    or damaged (`build_shared` then lists again, under the lock)."""
    try:
        with open(path) as kept:
            data = json.load(kept)
        age = time.time() - float(data["listed_at"])
        if data["folder"] != folder or not 0 <= age <= ttl:
            return None
        return [(str(name), int(size), None if mtime is None else int(mtime)) for name, size, mtime in data["entries"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
