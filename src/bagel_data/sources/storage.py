"""Open and list files on local disk or any filesystem `pyarrow.fs` understands by URI."""

from __future__ import annotations

import functools
import os
from typing import BinaryIO

import pyarrow.fs as pafs


def is_uri(path: str) -> bool:
    return "://" in path


@functools.lru_cache(maxsize=32)
def _filesystem_for(uri_root: str, endpoint: str | None) -> pafs.FileSystem:
    # Credentials, region and endpoint come from the usual environment variables
    # (AWS_ACCESS_KEY_ID, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL, GOOGLE_APPLICATION_CREDENTIALS,
    # HADOOP_HOME...), which pyarrow reads; the endpoint is part of the cache key so that a
    # changed endpoint is not served by a stale client.
    del endpoint
    filesystem, _ = pafs.FileSystem.from_uri(uri_root)
    return filesystem


def resolve(path: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding `path` and the path inside it."""
    if not is_uri(path):
        return pafs.LocalFileSystem(), os.path.abspath(path)
    scheme, rest = path.split("://", 1)
    bucket = rest.split("/", 1)[0]
    filesystem = _filesystem_for(f"{scheme}://{bucket}", os.environ.get("AWS_ENDPOINT_URL"))
    _, inner = pafs.FileSystem.from_uri(path)
    return filesystem, inner


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


def list_dir(path: str, sort: bool = True) -> list[str]:
    """Names (not paths) of the entries of folder `path`, sorted unless `sort` is False."""
    if not is_uri(path):
        names = os.listdir(path)
    else:
        filesystem, inner = resolve(path)
        names = [info.base_name for info in filesystem.get_file_info(pafs.FileSelector(inner, recursive=False))]
    return sorted(names) if sort else names
