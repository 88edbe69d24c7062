"""A real racer for the file-tool tests: a separate process that swaps two names with
renameat2(RENAME_EXCHANGE) as fast as it can, as a command inside the workspace would."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# The racer is its own interpreter (not a thread): it swaps while the tool runs on the other
# core, without waiting for this process's GIL.
_RACER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
AT_FDCWD, RENAME_EXCHANGE = -100, 2
sys.stdout.write("go\n"); sys.stdout.flush()
while True:
    if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
"""


class Racer:
    """`with Racer(a, b):` swaps `a` and `b` until the block ends."""

    def __init__(self, a: Path, b: Path) -> None:
        self.a, self.b = a, b
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Racer:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RACER, str(self.a), str(self.b)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == b"go\n", self.proc.stderr.read()
        time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        assert self.proc is not None
        alive = self.proc.poll() is None
        self.proc.kill()
        self.proc.wait()
        assert alive, f"the racer died: {self.proc.stderr.read().decode()}"


def settle(a: Path, b: Path) -> None:
    """Put the real directory back under `a` after a race (the swap count may be odd)."""
    if a.is_symlink():
        tmp = a.with_name(a.name + ".swap")
        os.rename(a, tmp)
        os.rename(b, a)
        os.rename(tmp, b)
