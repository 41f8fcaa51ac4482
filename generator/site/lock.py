"""One build per output folder at a time: an exclusive, non-blocking lock on a file beside it.

`public/` is guarded by `.public.lock` in the same parent folder (never inside the tree that is
swapped, and not matched by the build's own `.public-old-*` / `.public-build-*` recovery globs). A
second build started while the first holds the lock refuses at once with BuildLocked, before it
recovers, reads or writes anything: without the lock, the second build's recovery step would delete
the first one's half-written temporary tree.

The lock is a POSIX record lock (`fcntl.lockf`), not `flock`: it belongs to the process that took
it, so the build's forked worker processes do not inherit it, and the kernel drops it the moment that
process dies, SIGKILL included. A lock file left behind by a killed build therefore locks nothing;
the next build takes it and removes it when it is done. POSIX locks do not conflict within one
process, so the process also keeps a set of the locks it holds (two builds on threads of one process
refuse the same way).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import TraceError


class BuildLocked(TraceError):
    """Another build holds the lock of this output folder."""

    exit_code = 1

    def __init__(self, out_dir: Path, lock_path: Path, holder: str) -> None:
        self.out_dir = out_dir
        self.lock_path = lock_path
        who = f" (held by process {holder})" if holder else ""
        super().__init__(f"another build of {out_dir} is running: {lock_path} is locked{who}; "
                         "not starting a second one")


_HELD: set[str] = set()  # lock files this process holds
_HELD_GUARD = threading.Lock()


def lock_path(out_dir: Path) -> Path:
    """`<parent>/.<name>.lock` for an output folder `<parent>/<name>`."""
    out_dir = Path(out_dir).absolute()
    return out_dir.parent / f".{out_dir.name}.lock"


def _holder(fd: int) -> str:
    try:
        return os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""


@contextmanager
def build_lock(out_dir: Path) -> Iterator[Path]:
    """Hold the lock of out_dir for the duration of the block; raise BuildLocked if it is taken."""
    path = lock_path(out_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _HELD_GUARD:
        if str(path) in _HELD:
            raise BuildLocked(Path(out_dir), path, str(os.getpid()))
        _HELD.add(str(path))
    try:
        fd = _acquire(path, Path(out_dir))
    except BaseException:
        with _HELD_GUARD:
            _HELD.discard(str(path))
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield path
    finally:
        try:
            os.unlink(path)  # while still locked: nobody can have taken this inode in between
        except FileNotFoundError:
            pass
        os.close(fd)  # releases the lock
        with _HELD_GUARD:
            _HELD.discard(str(path))


def _acquire(path: Path, out_dir: Path) -> int:
    """An fd of the lock file holding the lock, or BuildLocked."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd)
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise BuildLocked(out_dir, path, holder) from None
            raise
        # The holder before us may have removed the file between our open and our lock: then we
        # locked an orphan inode that a third build could also lock under a new file. Start over.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)
