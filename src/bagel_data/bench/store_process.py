"""The object store of `bench --remote` in a process of its own: moto and the counting proxy
(moto_store.py) served from a child process, driven over a pipe.

A real object store's CPU is not the training worker's. In this process moto's HTTP server
and the proxy (pure Python, each copying every row group's bytes) would take the GIL and a
core from the pipeline being timed, and on two cores they took a third of its steady
throughput: a cost of the benchmark, not of reading remotely. Served from a child, the
store costs the pipeline what a distant one does: its requests and their round trips.

The parent's `StoreProcess` offers what the benchmark uses of an in-process `MotoStore`:
`upload`, and a `proxy` whose `delay_s` can be set, whose `counter` can be reset, and which
gives the pipeline its `storage_options`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Iterator
from pathlib import Path

from .s3_proxy import proxy_storage_options

_START_TIMEOUT_S = 120.0  # the child imports pyarrow and moto, and starts two servers


class RemoteCounter:
    """The child's request counter, read over the pipe."""

    def __init__(self, call):
        self._call = call

    def reset(self) -> dict[str, int]:
        """The counts by kind since the last reset; counting starts again from zero."""
        return self._call("reset")


class _Proxy:
    def __init__(self, call, endpoint: str):
        self._call, self.endpoint = call, endpoint
        self.counter = RemoteCounter(call)
        self._delay_s = 0.0

    @property
    def delay_s(self) -> float:
        return self._delay_s

    @delay_s.setter
    def delay_s(self, seconds: float) -> None:
        self._call("delay", float(seconds))
        self._delay_s = float(seconds)

    def storage_options(self) -> dict:
        return proxy_storage_options(self.endpoint)


class StoreProcess:
    """moto behind the counting proxy, in a child process."""

    def __init__(self, connection, process):
        self._connection, self._process = connection, process
        if not connection.poll(_START_TIMEOUT_S):
            raise RuntimeError(f"the object store process did not start within {_START_TIMEOUT_S:.0f} s")
        self.proxy = _Proxy(self._call, self._answer())

    def upload(self, local: str | Path, uri: str) -> int:
        """Every file under folder `local` to prefix `uri`, put straight into the child's moto."""
        return self._call("upload", str(local), uri)

    def _call(self, command: str, *args):
        self._connection.send((command, *args))
        return self._answer()

    def _answer(self):
        kind, value = self._connection.recv()
        if kind == "error":
            raise RuntimeError(f"the object store process failed: {value}")
        return value

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            self._connection.send(("stop",))
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


@contextlib.contextmanager
def store_process(delay_s: float = 0.0) -> Iterator[StoreProcess]:
    """moto on loopback behind a counting proxy adding `delay_s` per round trip, served from
    a child process (spawned: it inherits no threads or open files of this one)."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(child, delay_s), name="bagel-data-object-store", daemon=True)
    process.start()
    child.close()
    store = None
    try:
        store = StoreProcess(parent, process)
        yield store
    finally:
        if store is not None:
            store.close()
        elif process.is_alive():
            process.kill()
            process.join()


def _serve(connection, delay_s: float) -> None:
    """The child: start the store, then answer the parent's commands until it says stop."""
    from .moto_store import moto_store

    try:
        with moto_store(delay_s) as store:
            connection.send(("ok", store.proxy.endpoint))
            while True:
                command, *args = connection.recv()
                if command == "stop":
                    return
                try:
                    connection.send(("ok", _run(store, command, args)))
                except Exception as exc:  # told to the parent, which raises it
                    connection.send(("error", f"{command}: {type(exc).__name__}: {exc}"))
    except Exception as exc:
        connection.send(("error", f"start: {type(exc).__name__}: {exc}"))


def _run(store, command: str, args: list):
    if command == "upload":
        return store.upload(*args)
    if command == "delay":
        store.proxy.delay_s = args[0]
        return None
    if command == "reset":
        return store.proxy.counter.reset()
    raise ValueError(f"unknown command {command!r}")
