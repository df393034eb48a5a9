"""Reads of an object store from a process forked after its parent used the store (a
DataLoader's workers): each process reads its own answers (sources/fork_gate.py)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time

import pytest

from bagel_data.sources import fork_gate, storage


def _wait(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_fork_waits_for_the_store_reads_in_flight():
    """A thread of the library reading a store holds a pass; the fork happens only once it
    is given back, so no request of the parent is half done in the child (pyarrow's S3 lock
    would then stay held there, and the child's first client would wait for ever)."""
    inside, released = threading.Event(), []

    def read() -> None:
        with fork_gate.fetching():
            inside.set()
            time.sleep(0.3)  # a round trip
            released.append(True)

    thread = threading.Thread(target=read)
    thread.start()
    inside.wait()
    pid = os.fork()
    if pid == 0:  # the child sees the parent's memory as it was at the fork
        os._exit(0 if released and fork_gate.in_flight() == 0 else 1)
    thread.join()
    assert _wait(pid) == 0


def test_the_library_threads_read_inside_a_pass(monkeypatch):
    """The read-ahead's fetches and a resume's rebuild threads are the library's store
    readers off the main thread: each reads inside a pass."""
    from types import SimpleNamespace

    from bagel_data.packing import rebuild
    from bagel_data.sources.read_depth import DepthPool

    pool = DepthPool(1, 2, "fork-gate-test")
    try:
        assert pool.start(fork_gate.in_flight).result(timeout=60) == 1
    finally:
        pool.close()
    seen: list[int] = []
    monkeypatch.setattr(rebuild, "_clean_rebuild", lambda dataset, cursor: seen.append(fork_gate.in_flight()))
    items = [SimpleNamespace(group=0, cursor=(index,)) for index in range(3)]
    queue = rebuild.RebuildQueue(items, [None])  # type: ignore[arg-type]
    worker = threading.Thread(target=queue.work)
    worker.start()
    worker.join()
    assert seen == [1, 1, 1] and fork_gate.in_flight() == 0


def test_a_fork_from_inside_a_pass_does_not_wait_for_itself():
    """The forking thread's own pass is not waited for (it would never be given back)."""
    script = (
        "import os\n"
        "from bagel_data.sources import fork_gate\n"
        "with fork_gate.fetching():\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        with fork_gate.fetching():\n"  # the child's gate is its own: nothing held
        "            os._exit(fork_gate.in_flight() - 1)\n"
        "    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0\n"
        "assert fork_gate.in_flight() == 0\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_child_builds_its_own_store_client_and_keeps_the_parents():
    """The parent's filesystem objects are not used in a child (their connections are the
    parent's), nor freed there (a close would write to them): kept aside."""
    pytest.importorskip("fsspec")
    parent, _ = storage.resolve("memory://forks/a")
    assert storage.resolve("memory://forks/b")[0] is parent
    pid = os.fork()
    if pid == 0:
        child, _ = storage.resolve("memory://forks/a")
        kept = any(parent in built.values() for built in storage._INHERITED)
        os._exit(0 if child is not parent and kept and storage.resolve("memory://forks/c")[0] is child else 1)
    assert _wait(pid) == 0
    assert storage.resolve("memory://forks/a")[0] is parent


def test_forked_readers_of_a_store_the_parent_used_get_their_own_bytes(tmp_path, monkeypatch):
    """The parent reads several objects of an S3 store (moto, in a process of its own) and
    keeps reading on two threads while it forks two children; every process reads many
    4 KiB ranges, all the same size (another's answer would pass for its own), and checks
    them. On a client shared through the fork, answers crossed or never came."""
    pytest.importorskip("moto.server")
    from bagel_bench.store_process import store_process

    files = {f"f{index}.bin": random.Random(index).randbytes(1 << 20) for index in range(4)}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    monkeypatch.setattr(storage, "_OPTIONS", {})

    def check(seed: int, reads: int | None, stop: threading.Event | None = None) -> int:
        """Wrong ranges among `reads` (or until `stop`), on handles kept open across reads."""
        pick, wrong, handles, done = random.Random(seed), 0, {}, 0
        while (reads is None or done < reads) and not (stop is not None and stop.is_set()):
            name = pick.choice(sorted(files))
            start = pick.randrange(0, (1 << 20) - 4096, 4096)
            with fork_gate.fetching():  # as the library's read-ahead threads read
                if name not in handles:
                    handles[name] = storage.open_input(f"s3://forks/data/{name}")
                handles[name].seek(start)
                wrong += handles[name].read(4096) != files[name][start : start + 4096]
            done += 1
        return wrong

    with store_process() as store:
        store.upload(tmp_path, "s3://forks/data")
        options = {**store.proxy.storage_options(), "request_timeout": 10.0, "connect_timeout": 10.0}
        storage.register_options("s3://forks/data", options)
        assert check(1, 20) == 0
        stop, parent_wrong = threading.Event(), []
        threads = [threading.Thread(target=lambda n=n: parent_wrong.append(check(n, None, stop))) for n in (2, 3)]
        for thread in threads:
            thread.start()
        time.sleep(0.3)  # the threads' requests are in flight
        children = []
        for seed in (10, 11):
            pid = os.fork()
            if pid == 0:
                code = 3
                try:
                    code = min(check(seed, 60), 2)  # 0: every range right
                finally:
                    os._exit(code)  # 3: an error (a crossed answer's length, a timeout)
            children.append(pid)
        codes = [_wait(pid) for pid in children]
        stop.set()
        for thread in threads:
            thread.join()
    assert codes == [0, 0] and parent_wrong == [0, 0], (codes, parent_wrong)
