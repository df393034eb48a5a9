"""No store request in flight when this process forks, and a child that opens its own stores.

An object store's client (pyarrow's S3 client: the AWS SDK over curl) keeps its connections
open between requests and is not fork-safe. A DataLoader's worker forked from a process
that has used a store gets copies of the parent's client and sockets; a request the child
sends down an inherited socket and one the parent sends down the same socket read each
other's answers (another request's bytes, or a wait for an answer the other process took).
So a child must build its own clients (`storage` forgets the parent's after a fork).

It can only do so if no request was in flight at the fork: pyarrow holds a lock of its S3
subsystem for each request, and a client cannot be built while one is held. A lock held by
a thread of the parent at the fork stays held in the child forever, and its first new
client waits for good. So the threads of this library that read stores (the read-ahead's
fetches, a resume's rebuild) each hold a pass of this gate (`fetching`) while they read,
and a fork waits until the passes in flight are given back and lets no new one start
before it is done: about one round trip, and only in a process whose threads were reading.

The hooks are registered on the first pass or the first store client, never at import.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator


class _Gate:
    def __init__(self) -> None:
        self.changed = threading.Condition(threading.Lock())
        self.busy = 0  # passes held, by all threads
        self.forking = False
        self.mine = threading.local()  # passes held by this thread (a pass may nest)


_gate = _Gate()
_children: list[Callable[[], None]] = []  # what a child does first (`on_fork_child`)
_hooked: list[bool] = []


def _held_here() -> int:
    return getattr(_gate.mine, "count", 0)


@contextlib.contextmanager
def fetching() -> Iterator[None]:
    """A pass: store requests made inside run to their end before this process forks."""
    _hook()
    gate = _gate
    with gate.changed:
        while gate.forking and not _held_here():  # a nested pass does not wait for a fork
            gate.changed.wait()
        gate.busy += 1
        gate.mine.count = _held_here() + 1
    try:
        yield
    finally:
        with gate.changed:
            gate.busy -= 1
            gate.mine.count = _held_here() - 1
            gate.changed.notify_all()


def in_flight() -> int:
    """Passes held now (by all threads)."""
    with _gate.changed:
        return _gate.busy


def on_fork_child(callback: Callable[[], None]) -> None:
    """Run `callback` first thing in every child this process forks from now on."""
    _hook()
    if callback not in _children:
        _children.append(callback)


def _hook() -> None:
    if not _hooked:
        _hooked.append(True)
        os.register_at_fork(before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child)


def _before() -> None:
    """Wait for the passes in flight (but the forking thread's own) and hold new ones back."""
    gate = _gate
    with gate.changed:
        gate.forking = True
        while gate.busy > _held_here():
            gate.changed.wait()


def _after_in_parent() -> None:
    with _gate.changed:
        _gate.forking = False
        _gate.changed.notify_all()


def _after_in_child() -> None:
    global _gate
    _gate = _Gate()  # the parent's passes are not this process's; its lock may look held
    for callback in _children:
        callback()
