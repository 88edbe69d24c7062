"""Atomic file writes that keep the file's mode bits."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` via a temp file in the same directory and rename.

    A crash mid-write leaves either the old or the new file, never half of one. An existing
    file keeps its permission bits (a script stays executable).
    """
    mode = None
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".m3tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def looks_binary(head: bytes) -> bool:
    return b"\x00" in head
