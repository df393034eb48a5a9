"""A counting, delaying HTTP reverse proxy for an S3 server on loopback (moto, see
moto_store.py): how `bench --remote` and the start-up tests see what the pipeline asks an
object store for, and what a distant one would cost.

Every request is forwarded as is to the upstream server over a persistent connection per
proxy thread, after sleeping `delay_s` (the added round trip: a far-away store answers each
request that much later, however small). Requests are counted by method and kind (`list`,
`object`, `bucket`), so a test can hold start-up to a number of requests and a benchmark can
report them per phase.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import http.server
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

# Hop-by-hop headers (RFC 9110 7.6.1) are the proxy's own business, not the upstream's.
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}
CREDENTIALS = {"access_key": "testing", "secret_key": "testing", "region": "us-east-1"}


def request_kind(method: str, target: str) -> str:
    """`"<METHOD> <kind>"` of a path-style S3 request: `list` (a bucket GET with a listing
    query), `bucket` (any other request on the bucket itself) or `object`."""
    parts = urlsplit(target)
    key = parts.path.lstrip("/").partition("/")[2]
    query = parse_qs(parts.query, keep_blank_values=True)
    if not key:
        kind = "list" if method == "GET" and ("list-type" in query or "prefix" in query or not query) else "bucket"
    else:
        kind = "object"
    return f"{method} {kind}"


class RequestCounter:
    """Counts of requests by `request_kind`, safe to bump from the proxy's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()
        self._bytes = 0

    def add(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1

    def add_bytes(self, sent: int) -> None:
        with self._lock:
            self._bytes += sent

    def reset_bytes(self) -> int:
        """The response bytes sent so far (bodies), then zero."""
        with self._lock:
            sent, self._bytes = self._bytes, 0
        return sent

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> dict[str, int]:
        """The counts so far, then zero: one phase's requests."""
        with self._lock:
            counts, self._counts = dict(self._counts), collections.Counter()
        return counts

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the S3 client expects
    server: _ProxyServer

    def _forward(self) -> None:
        proxy = self.server
        proxy.counter.add(request_kind(self.command, self.path))
        if proxy.delay_s > 0:
            time.sleep(proxy.delay_s)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        upstream = self._upstream()
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            upstream.close()  # a stale keep-alive connection: one fresh retry
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            payload = response.read()
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        # A HEAD answer declares the object's length without a body; pass it through.
        declared = response.getheader("Content-Length")
        self.send_header("Content-Length", declared if self.command == "HEAD" and declared else str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
            proxy.counter.add_bytes(len(payload))

    def _upstream(self) -> http.client.HTTPConnection:
        local = self.server.local
        if getattr(local, "connection", None) is None:
            local.connection = http.client.HTTPConnection(self.server.upstream_host, self.server.upstream_port)
        return local.connection

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

    def log_message(self, format: str, *args) -> None:  # one line per request otherwise
        pass


class _ProxyServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, delay_s: float):
        super().__init__(("127.0.0.1", 0), _Handler)
        host, _, port = urlsplit(upstream).netloc.partition(":")
        self.upstream_host, self.upstream_port = host, int(port or 80)
        self.delay_s = delay_s
        self.counter = RequestCounter()
        self.local = threading.local()


@dataclass
class CountingProxy:
    """A running proxy: `endpoint` to point clients at, `counter`, and a settable `delay_s`."""

    server: _ProxyServer
    endpoint: str

    @property
    def counter(self) -> RequestCounter:
        return self.server.counter

    @property
    def delay_s(self) -> float:
        return self.server.delay_s

    @delay_s.setter
    def delay_s(self, seconds: float) -> None:
        self.server.delay_s = seconds

    def storage_options(self) -> dict:
        return proxy_storage_options(self.endpoint)


def proxy_storage_options(endpoint: str) -> dict:
    """dataset_info `storage_options` that send pyarrow's S3 client through the proxy at
    `endpoint` (`http://host:port`)."""
    scheme, host = endpoint.split("://")
    # The AWS SDK gives up on a response silent for 3 s; a loaded test machine's moto can
    # take that long to list a thousand keys.
    return {"endpoint_override": host, "scheme": scheme, "request_timeout": 60.0, **CREDENTIALS}


@contextlib.contextmanager
def counting_proxy(upstream: str, delay_s: float = 0.0) -> Iterator[CountingProxy]:
    """A proxy in front of `upstream` (`http://host:port`), served from a thread until exit."""
    server = _ProxyServer(upstream, delay_s)
    thread = threading.Thread(target=server.serve_forever, name="s3-proxy", daemon=True)
    thread.start()
    try:
        yield CountingProxy(server, f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
