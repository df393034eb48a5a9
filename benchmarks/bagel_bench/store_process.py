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
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from . import child_env
from .s3_proxy import proxy_storage_options


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
    """moto behind the counting proxy, in a child process: one JSON line per command on its
    standard input, one answer per line on its standard output."""

    def __init__(self, process: subprocess.Popen):
        self._process = process
        self.proxy = _Proxy(self._call, self._answer("start"))

    def upload(self, local: str | Path, uri: str) -> int:
        """Every file under folder `local` to prefix `uri`, put straight into the child's moto."""
        return self._call("upload", str(local), uri)

    def bytes(self) -> int:
        """The response bytes the proxy sent since the last call (bodies), then zero."""
        return self._call("bytes")

    def _call(self, command: str, *args):
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps([command, *args]) + "\n")
            self._process.stdin.flush()
        except BrokenPipeError:
            pass  # it has exited: `_answer` says how
        return self._answer(command)

    def _answer(self, command: str):
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            code = self._process.wait(10)
            raise RuntimeError(f"the object store process exited (code {code}) at {command!r}; its errors are above")
        kind, value = json.loads(line)
        if kind == "error":
            raise RuntimeError(f"the object store process failed: {value}")
        return value

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self._process.stdin is not None
            self._process.stdin.close()  # its end of input: it stops
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


@contextlib.contextmanager
def store_process(delay_s: float = 0.0) -> Iterator[StoreProcess]:
    """moto on loopback behind a counting proxy adding `delay_s` per round trip, served from
    a child interpreter (a fresh one: it inherits no threads or open files of this one)."""
    env = child_env()  # this very bagel_data and bagel_bench, not another
    process = subprocess.Popen(
        [sys.executable, "-m", "bagel_bench.store_process", str(delay_s)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    store = None
    try:
        store = StoreProcess(process)
        yield store
    finally:
        if store is not None:
            store.close()
        elif process.poll() is None:
            process.kill()
            process.wait()


def _serve(delay_s: float) -> None:
    """The child: start the store, then answer the parent's commands until its input ends."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # anything else printed goes to stderr

    def answer(kind: str, value) -> None:
        answers.write(json.dumps([kind, value]) + "\n")
        answers.flush()

    from .moto_store import moto_store

    try:
        store_context = moto_store(delay_s)
        store = store_context.__enter__()
    except Exception as exc:
        answer("error", f"start: {type(exc).__name__}: {exc}")
        return
    try:
        answer("ok", store.proxy.endpoint)
        for line in sys.stdin:
            command, *args = json.loads(line)
            try:
                answer("ok", _run(store, command, args))
            except Exception as exc:  # told to the parent, which raises it
                answer("error", f"{command}: {type(exc).__name__}: {exc}")
    finally:
        store_context.__exit__(None, None, None)


def _run(store, command: str, args: list):
    if command == "upload":
        return store.upload(*args)
    if command == "delay":
        store.proxy.delay_s = args[0]
        return None
    if command == "reset":
        return store.proxy.counter.reset()
    if command == "bytes":
        return store.proxy.counter.reset_bytes()
    raise ValueError(f"unknown command {command!r}")


if __name__ == "__main__":
    _serve(float(sys.argv[1]))
