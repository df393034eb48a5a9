"""The node's cache root: one folder per user, shared by every process of a node.

The JSONL and tar indexes (`jsonl_cache`, `tar_index`) and the remote video tables
(`media/video_tables`) keep their files here, so that one process per node builds what the
others then read. The root is `$BAGEL_DATA_INDEX_CACHE`, by default
`bagel-data-index-cache-<uid>` in the system's temporary folder.

`build_shared` is the one build-under-lock of the node's files (read / lock / re-read /
build / atomic publish); the lock files are `locked`'s, used nowhere else. An error that
says the cache cannot be written (`cannot_write`: a full disk, a quota, a file-size limit, a
read-only or forbidden folder) never ends a run: the callers build in memory instead, with
one warning per root. It must be a folder of
this user's that no one else can write, since others could plant files there. A default root
that is not is moved aside (this user's) or left alone (another user's); a root set in the
environment is never moved. `BAGEL_DATA_INDEX_CACHE=off` (any case) turns the cache off.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import shutil
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TypeVar

from ..errors import IndexCacheWarning

ENV = "BAGEL_DATA_INDEX_CACHE"

_warned: set[str] = set()  # roots already warned about in this process

# The errors that say a file cannot be written here (as opposed to a bug or a bad input).
CANNOT_WRITE = frozenset(
    code
    for code in (
        errno.ENOSPC,  # the disk is full
        errno.EDQUOT,  # the user's quota is spent
        errno.EFBIG,  # over a file-size limit (`ulimit -f`)
        errno.EROFS,  # a read-only file system
        errno.EACCES,  # forbidden
        errno.EPERM,
        errno.EMLINK,
        errno.ENAMETOOLONG,
    )
)
T = TypeVar("T")


def cannot_write(error: OSError) -> bool:
    """Whether `error` says that the cache (or a work folder) cannot be written."""
    return error.errno in CANNOT_WRITE


def default_root() -> str:
    return os.path.join(tempfile.gettempdir(), f"bagel-data-index-cache-{os.geteuid()}")


def cache_root() -> str | None:
    """Where the node's files are kept, or None when the cache is off."""
    value = os.environ.get(ENV)
    if value is None:
        return default_root()
    return None if value.strip().lower() in ("", "off", "0", "none") else value


def root_trouble(root: str) -> str | None:
    """None when `root` can be used, else why not (the message's tail, with the fix)."""
    try:
        return usable_root(root, moveable=os.environ.get(ENV) is None)
    except OSError as error:
        return f"it cannot be written ({error.strerror or error}); set {ENV} to a folder with room"


def shared_folder(name: str) -> str | None:
    """The folder `name` under the cache root, made if needed; None when the cache is off or
    the root is unsafe or cannot be written (warned once)."""
    root = cache_root()
    if root is None:
        return None
    trouble = root_trouble(root)
    if trouble is None:
        folder = os.path.join(root, name)
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            return folder
        except OSError as error:
            trouble = f"it cannot be written ({error.strerror or error}); set {ENV} to a folder with room"
    warn_once(root, f"the node cache {root} is not used: {trouble}.")
    return None


def warn_once(root: str, message: str) -> None:
    if root not in _warned:
        _warned.add(root)
        warnings.warn(message, IndexCacheWarning, stacklevel=4)


def usable_root(root: str, moveable: bool) -> str | None:
    """None when `root` is (made) a folder of this user's that others cannot write, else why
    not. `moveable`: the default root, moved aside when unsafe and this user's."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    info = os.lstat(root) if moveable else os.stat(root)  # a planted link at the default is refused
    fix = f"set {ENV} to a folder of your own (mode 0700) or to off"
    if not stat.S_ISDIR(info.st_mode):
        return f"it is not a folder; {fix}"
    if info.st_uid != os.geteuid():
        return f"it belongs to user id {info.st_uid}, not to this user ({os.geteuid()}); {fix}"
    if info.st_mode & 0o022:
        if not moveable:
            return f"others can write it (mode {stat.S_IMODE(info.st_mode):o}); chmod go-w it, or {fix}"
        aside = f"{root}.unsafe-{os.getpid()}-{time.time_ns()}"
        os.rename(root, aside)  # kept for a look: what is in it may have been planted
        os.mkdir(root, 0o700)
        warnings.warn(f"{root} was writable by others: moved to {aside}", IndexCacheWarning, stacklevel=4)
    return None


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold the lock file `path` (one process of the node at a time). A failed holder removes
    the file: its waiters see that the file they hold is no longer the one at `path` and take
    the new one."""
    while True:
        handle = open(path, "a+")  # noqa: SIM115 (held across the yield below)
        fcntl.flock(handle, fcntl.LOCK_EX)  # the other processes of the node wait here
        try:
            current = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        handle.close()
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def build_shared(final: str, read: Callable[[str], T | None], write: Callable[[str], None]) -> T:
    """What `read(final)` gives, built first by one process of the node: read; else take the
    lock, build with `write(work)` into a work path beside `final` and publish it there with
    one rename (readers see the whole file or folder, or none), and read it after the lock is
    let go (the woken waiters do not each read while holding it). A `final` that does not
    read back (`read` gives None: a crash, a full disk or a hand damaged it) is built again.
    An OSError goes to the caller, who builds in memory instead (see `cannot_write`)."""
    found = read(final)
    if found is not None:
        return found
    damaged = os.path.lexists(final)
    lock = final + ".lock"
    with locked(lock):
        if damaged and os.path.lexists(final) and read(final) is None:
            _discard(final)  # built again (unless another process has done so meanwhile)
        if not os.path.lexists(final):
            _publish(final, write)
        # Removed while held: a waiter on this lock file sees that it is gone and takes a new
        # one (`locked`), then finds `final`; no lock file is left behind.
        with contextlib.suppress(OSError):
            os.unlink(lock)
    found = read(final)
    if found is None:
        raise OSError(errno.EIO, f"{final} was just built and does not read back")
    return found


def _publish(final: str, write: Callable[[str], None]) -> None:
    for stale in glob.glob(glob.escape(final) + ".tmp-*"):  # left by a builder that died
        _remove(stale)
    work = f"{final}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        write(work)
        os.replace(work, final)  # atomic: readers see the whole of it or none
    except BaseException:
        _remove(work)
        raise


def _discard(path: str) -> None:
    aside = f"{path}.damaged-{os.getpid()}-{threading.get_ident()}"
    os.rename(path, aside)  # processes reading it keep what they opened
    _remove(aside)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


# numpy reads a .npy header with `ast.literal_eval`, and CPython 3.11 can fail that when two
# threads parse at once ("AST constructor recursion depth mismatch"): the read-ahead maps the
# next tar's index while the stream maps another. Reads of stored arrays take this lock.
NPY_READ_LOCK = threading.Lock()
