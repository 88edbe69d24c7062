"""One page file of the disk tier (disk.py) on disk: read whole, or written atomically.

A page is read unbuffered into one buffer, never through a symlink, only when this user wrote
it, then checked (page_file.decode). It is written to a unique temporary name in directories of
this user, fsynced and renamed: a reader sees a whole page or none, and two processes writing
the same page both write a valid one (the last rename wins). Nothing here logs: the disk tier
says what a failure costs, once.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .page_file import PageKey, PageRejected, decode

# The OS-write boundary: every byte of a page goes through here (tests inject ENOSPC).
_os_write = os.write


@dataclass(frozen=True, slots=True)
class Loaded:
    """One page read: its payload, or why not (None: simply missing)."""

    payload: memoryview | None
    reason: str | None = None
    remove: bool = True  # an unusable page file is deleted; an unreadable one is left


def _open_page(path: str | Path) -> io.FileIO:
    """A page file opened to read, unbuffered; never through a symlink (ELOOP: unreadable)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    return io.FileIO(fd, "rb", closefd=True)


def load_page(
    path: str,
    buffer: Callable[[int], bytearray],
    model: str,
    key: PageKey,
    payload_bytes: int,
) -> Loaded:
    """Reads the page file at `path` into `buffer(size)` (a bytearray of at least that size)
    and checks it is a whole page of identity `model` naming `key`."""
    try:
        with _open_page(path) as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.geteuid():  # a shared folder: checked, not authenticated
                return Loaded(None, "written by another user", remove=False)
            size = st.st_size
            buf = buffer(size)
            got = f.readinto(memoryview(buf)[:size])
    except FileNotFoundError:
        return Loaded(None, None)
    except OSError as e:
        return Loaded(None, f"unreadable ({e.strerror or e})", remove=False)
    try:
        return Loaded(decode(memoryview(buf)[:got], model, key, payload_bytes))
    except PageRejected as e:
        return Loaded(None, str(e))


def _check_own_dirs(top: Path, shard: Path) -> None:
    """The model's folder, its `pages` and the shard are directories of this user, not
    symlinks (in a folder shared with other users, one could plant `pages/ab -> ~/.ssh` and
    have our pages written there); PermissionError otherwise (the page is dropped)."""
    for d in (top, shard.parent, shard):
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise PermissionError(errno.EPERM, "not a directory of this user", str(d))


def write_page(top: Path, path: Path, parts: Sequence[memoryview | bytes]) -> None:
    """Writes `parts` as the page file `path` under the model's folder `top`: through a
    unique temporary file, fsynced, then renamed. OSError when it could not (no temporary file
    is left behind)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.parent.mkdir(mode=0o700, exist_ok=True)  # private, whatever the umask
        path.parent.mkdir(mode=0o700, exist_ok=True)
        _check_own_dirs(top, path.parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            for part in parts:
                _write_all(fd, part)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _write_all(fd: int, part: memoryview | bytes) -> None:
    view = memoryview(part).cast("B")
    while view:
        n = _os_write(fd, view)
        view = view[n:]
