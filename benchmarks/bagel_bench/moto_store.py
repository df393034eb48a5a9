"""An S3 server on loopback (moto, a dev dependency) behind the counting proxy
(s3_proxy.py), with data put straight into it: the object store of `bench --remote` and of
the start-up request tests.

moto's threaded server runs in this process and keeps its objects in this process's moto
backend, so uploads are written there directly: an HTTP PUT per file would take a minute
at a few thousand files, and is not what is measured.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bagel_data.sources import storage

from .s3_proxy import CountingProxy, counting_proxy


@dataclass
class MotoStore:
    """moto's own endpoint, and the proxy (`proxy.endpoint`) the pipeline is sent through."""

    endpoint: str
    proxy: CountingProxy

    def upload(self, local: str | Path, uri: str) -> int:
        """Every file under folder `local` to prefix `uri` (`s3://bucket/prefix`), the bucket
        made when missing; the number of files."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
        bucket, _, prefix = uri.split("://", 1)[1].partition("/")
        if bucket not in backend.buckets:
            backend.create_bucket(bucket, "us-east-1")
        files = [path for path in sorted(Path(local).rglob("*")) if path.is_file()]
        for path in files:
            key = "/".join(part for part in (prefix.strip("/"), path.relative_to(local).as_posix()) if part)
            backend.put_object(bucket, key, path.read_bytes())
        return len(files)

    def register(self, uri: str) -> dict:
        """Send every path of `uri`'s bucket through the proxy, as dataset_info's
        `storage_options` would; the options."""
        options = self.proxy.storage_options()
        storage.register_options(uri, options)
        return options


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server on a free loopback port: its `http://` endpoint."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise RuntimeError("the remote benchmark needs moto: pip install 'moto[server]' (the dev extra)") from exc
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def moto_store(delay_s: float = 0.0) -> Iterator[MotoStore]:
    """moto on loopback behind a counting proxy that adds `delay_s` to each round trip."""
    with moto_server() as endpoint, counting_proxy(endpoint, delay_s) as proxy:
        yield MotoStore(endpoint, proxy)
