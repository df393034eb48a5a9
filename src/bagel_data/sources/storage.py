"""Open and list files on local disk or any filesystem `pyarrow.fs` understands by URI.

`s3://`, `gs://` and `hdfs://` go through pyarrow's own filesystems; any other scheme that
fsspec knows (`memory://`, `http(s)://`, `az://`, ... with the matching fsspec package
installed) through fsspec, wrapped as a pyarrow filesystem.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import BinaryIO, NamedTuple, TypeVar

import pyarrow.fs as pafs

from ..errors import StorageOptionsError
from ..instruments import seam
from . import fork_gate
from .shared_listing import shared_listing


def is_uri(path: str) -> bool:
    return "://" in path


def is_remote(path: str) -> bool:
    """Whether `path` is read over a network: any URI but `file://`."""
    return is_uri(path) and not path.startswith("file://")


# The largest media file (or tar member a sample uses) read whole: an image, a frame of a
# frame folder; media/safe_read.py and sources/tar_members.py hold reads to it.
MAX_MEDIA_BYTES = 256 << 20

# Filesystem options per URI root (`scheme://bucket`), from dataset_info's `storage_options`.
# Kept by value (sorted item tuples) so they can key the filesystem cache and travel to
# DataLoader workers with the dataset (`registered` / `register_all`).
_OPTIONS: dict[str, tuple] = {}
_FILESYSTEMS = {"s3": pafs.S3FileSystem, "gs": pafs.GcsFileSystem, "gcs": pafs.GcsFileSystem}
_PYARROW_SCHEMES = {*_FILESYSTEMS, "hdfs", "viewfs", "file"}
T = TypeVar("T")


def _root(uri: str) -> str:
    scheme, rest = uri.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def register_options(uri: str, options: dict) -> None:
    """Use `options` (keyword arguments of pyarrow's S3FileSystem / GcsFileSystem /
    HadoopFileSystem, or of the fsspec filesystem for other schemes) for every path in the
    bucket (or host) of `uri`.

    The filesystem is built at once, so a wrong option fails here, not inside a worker.
    """
    root = _root(uri)
    frozen = tuple(sorted(options.items()))
    if _OPTIONS.get(root, frozen) != frozen:
        raise StorageOptionsError(f"{root} already has different storage options ({sorted(dict(_OPTIONS[root]))})")
    try:
        _filesystem_for(root, frozen, None)
    except (TypeError, ValueError) as exc:
        raise StorageOptionsError(str(exc)) from None
    _OPTIONS[root] = frozen


def registered() -> dict[str, tuple]:
    return dict(_OPTIONS)


def register_all(saved: dict[str, tuple]) -> None:
    """Re-register options in a process that did not build the dataset (a spawned worker)."""
    for root, frozen in saved.items():
        _OPTIONS.setdefault(root, frozen)


# The filesystems built in this process, by what built them. A child forked from this
# process (a DataLoader's worker) must not use them: see `fork_gate`.
_BUILT: dict[tuple, object] = {}
_MAX_BUILT = 32
# A forked child's copies of its parent's filesystems: kept, never used nor freed, since
# freeing one closes connections (a TLS close writes to a socket the parent still reads).
_INHERITED: list[dict] = []
_BUILT_LOCK = threading.Lock()


def _built(key: tuple, build: Callable[[], T]) -> T:
    """The filesystem `build()` made for `key` in this process, built on first use."""
    found = _BUILT.get(key)
    if found is None:
        fork_gate.on_fork_child(_forget_after_fork)
        found = build()  # outside the lock: a store's client may ask the network
        with _BUILT_LOCK:
            found = _BUILT.setdefault(key, found)
            if len(_BUILT) > _MAX_BUILT:
                del _BUILT[next(iter(_BUILT))]
    return found  # type: ignore[return-value]


def _forget_after_fork() -> None:
    """In a child just forked: build new filesystems, keeping the parent's copies aside."""
    global _BUILT_LOCK
    _BUILT_LOCK = threading.Lock()  # a parent thread may have held it at the fork
    if _BUILT:
        _INHERITED.append(dict(_BUILT))
        _BUILT.clear()


def _filesystem_for(uri_root: str, options: tuple, endpoint: str | None) -> pafs.FileSystem:
    # Without options, credentials, region and endpoint come from the usual environment
    # variables (AWS_ACCESS_KEY_ID, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL,
    # GOOGLE_APPLICATION_CREDENTIALS, HADOOP_HOME...), which pyarrow reads; the endpoint is
    # part of the cache key so that a changed endpoint is not served by a stale client.
    return _built(("pyarrow", uri_root, options, endpoint), lambda: _new_filesystem(uri_root, options))


def _new_filesystem(uri_root: str, options: tuple) -> pafs.FileSystem:
    scheme, host = uri_root.split("://", 1)
    if scheme not in _PYARROW_SCHEMES:
        return pafs.PyFileSystem(pafs.FSSpecHandler(_fsspec_filesystem(uri_root, options)))
    if not options:
        filesystem, _ = pafs.FileSystem.from_uri(uri_root)
        return filesystem
    if scheme == "hdfs":
        name, _, port = host.partition(":")
        return pafs.HadoopFileSystem(name, int(port or 8020), **dict(options))
    return _FILESYSTEMS[scheme](**dict(options))


def _fsspec_filesystem(uri_root: str, options: tuple):
    """The fsspec filesystem for a scheme pyarrow has no filesystem for."""
    return _built(("fsspec", uri_root, options), lambda: _new_fsspec_filesystem(uri_root, options))


def _new_fsspec_filesystem(uri_root: str, options: tuple):
    import fsspec  # a dependency of torch

    try:
        # fsspec keeps its own instances too; it makes new ones in a process of another pid.
        filesystem, _ = fsspec.core.url_to_fs(uri_root, **dict(options))
    except (ValueError, ImportError) as exc:  # unknown protocol, or its package is missing
        raise StorageOptionsError(
            f"no filesystem for {uri_root}: neither pyarrow nor fsspec can open it ({exc})"
        ) from None
    return filesystem


def resolve(path: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding `path` and the path inside it."""
    if not is_uri(path):
        return pafs.LocalFileSystem(), os.path.abspath(path)
    root = _root(path)
    filesystem = _filesystem_for(root, _OPTIONS.get(root, ()), os.environ.get("AWS_ENDPOINT_URL"))
    return filesystem, _inner_path(path)


def _inner_path(uri: str) -> str:
    # Parsed here: FileSystem.from_uri would build an S3 client (and ask AWS for the
    # bucket's region) just to split the string.
    scheme, rest = uri.split("://", 1)
    if scheme in _FILESYSTEMS:
        return rest.split("?", 1)[0].rstrip("/")
    if scheme == "hdfs":
        return "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    if scheme not in _PYARROW_SCHEMES:
        root = _root(uri)
        return _fsspec_filesystem(root, _OPTIONS.get(root, ()))._strip_protocol(uri)
    _, inner = pafs.FileSystem.from_uri(uri)
    return inner


@seam("open")
def open_input(path: str) -> BinaryIO:
    """A seekable binary file object for `path` (local path or URI)."""
    if not is_uri(path):
        return open(path, "rb")
    filesystem, inner = resolve(path)
    return filesystem.open_input_file(inner)


def read_bytes(path: str) -> bytes:
    with open_input(path) as handle:
        return handle.read()


def join(root: str, name: str) -> str:
    if is_uri(root):
        return root.rstrip("/") + "/" + name
    return os.path.join(root, name)


def exists(path: str) -> bool:
    if not is_uri(path):
        return os.path.exists(path)
    filesystem, inner = resolve(path)
    return filesystem.get_file_info(inner).type != pafs.FileType.NotFound


def folder_exists(path: str) -> bool:
    """Whether folder `path` exists. On a store, from its listing (which the dataset takes
    next anyway, and one process of the node shares with the others: `list_entries`)
    instead of a HEAD and a one-key listing per process; a store folder is a prefix with
    objects under it."""
    if not is_remote(path):
        return exists(path)  # no round trip to save
    try:
        list_entries(path, sort=False)
    except FileNotFoundError:
        return False
    return True


class Entry(NamedTuple):
    """One entry of a folder listing: its name, bytes (-1 when it cannot be read) and
    modification time in ns (None when unknown)."""

    name: str
    size: int
    mtime_ns: int | None


def list_entries(path: str, sort: bool = True) -> list[Entry]:
    """The entries of folder `path` with their sizes and modification times, sorted by name
    unless `sort` is False (then in the folder's own order, as `os.listdir` gives it).

    On an object store this is one listing (a request per 1,000 keys), where asking each
    file's size would be a request per file, taken by one process of the node and shared
    with those that list the folder soon after (`shared_listing`). FileNotFoundError when
    the folder is missing.
    """
    if not is_uri(path):
        with os.scandir(path) as scan:
            entries = [_local_entry(item) for item in scan]
    else:
        root = _root(path)
        identity = (_OPTIONS.get(root, ()), os.environ.get("AWS_ENDPOINT_URL"))
        listed = shared_listing(path.rstrip("/"), identity, lambda: _list_store(path))
        entries = [Entry(*entry) for entry in listed]
    return sorted(entries) if sort else entries


def _list_store(path: str) -> list[tuple[str, int, int | None]]:
    filesystem, inner = resolve(path)
    infos = filesystem.get_file_info(pafs.FileSelector(inner, recursive=False))
    return [(info.base_name, int(info.size or 0), info.mtime_ns) for info in infos]


def _local_entry(item: os.DirEntry) -> Entry:
    try:
        stat = item.stat()  # follows links, as the file's later reads do
    except OSError:  # a dangling link: missing, as a stat of the path would say
        return Entry(item.name, -1, None)
    # pyarrow gives a folder no size; matching it keeps a resume record's entries the same.
    return Entry(item.name, 0 if item.is_dir() else stat.st_size, stat.st_mtime_ns)


def list_dir(path: str, sort: bool = True) -> list[str]:
    """Names (not paths) of the entries of folder `path`, sorted unless `sort` is False."""
    if not is_uri(path):
        names = os.listdir(path)
    else:
        filesystem, inner = resolve(path)
        names = [info.base_name for info in filesystem.get_file_info(pafs.FileSelector(inner, recursive=False))]
    return sorted(names) if sort else names
