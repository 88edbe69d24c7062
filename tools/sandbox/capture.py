"""Command output through descriptors the host opened before launch, never reopened by path.

Each stream goes to an anonymous file (O_TMPFILE, or created and unlinked at once) in the
host's own temp dir. The command inherits the descriptor as its stdout/stderr; the host keeps
its own descriptor and reads through it with `pread` after the command ends. There is no name
the command could rename, replace by a symlink, a FIFO or `/dev/zero`: whatever it does to
paths, the host reads the file it created, and at most `cap` bytes of it.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Captured:
    text: str
    size: int  # bytes the command wrote
    truncated: bool


class Capture:
    """Two anonymous files (stdout, stderr); use as a context manager."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.out = tempfile.TemporaryFile(prefix="m3agent-out-")
        self.err = tempfile.TemporaryFile(prefix="m3agent-err-")

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.out.close()
        self.err.close()

    def read(self) -> tuple[Captured, Captured]:
        return read_fd(self.out.fileno(), self.cap), read_fd(self.err.fileno(), self.cap)


def _pread_all(fd: int, n: int, offset: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = os.pread(fd, n - got, offset + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_fd(fd: int, cap: int) -> Captured:
    """First and last cap/2 bytes of the file behind fd, with a note of what was cut."""
    size = os.fstat(fd).st_size  # a regular file we created: fstat and pread never block
    if size <= cap:
        data = _pread_all(fd, size, 0)
        return Captured(data.decode("utf-8", "replace"), size, False)
    head = _pread_all(fd, cap // 2, 0)
    tail = _pread_all(fd, cap // 2, size - cap // 2)
    note = f"\n[... {size - len(head) - len(tail)} bytes of output cut; {size} bytes in all ...]\n"
    text = head.decode("utf-8", "replace") + note + tail.decode("utf-8", "replace")
    return Captured(text, size, True)
