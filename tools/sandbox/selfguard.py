"""Hardening of the agent process itself, which holds the API keys the commands must not see.

`make_undumpable`: PR_SET_DUMPABLE 0, so /proc/<agent>/environ, mem, fd/ and maps need
CAP_SYS_PTRACE (which no command keeps) even from a process of the same user, and no core
dump writes the keys to disk. Called when a Sandbox is made.

`forget_environ`: after the app has read its keys into memory, remove them from os.environ
*and* wipe them from the process's initial environment block, which is what
/proc/<pid>/environ shows (unsetenv alone leaves the bytes there).
"""

from __future__ import annotations

import ctypes
import os

PR_SET_DUMPABLE = 4


def make_undumpable() -> bool:
    try:
        rc: int = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        return rc == 0
    except (OSError, AttributeError):
        return False


def _env_block() -> tuple[int, int]:
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    # fields[0] is the state (field 3 of stat); env_start/env_end are fields 50 and 51
    return int(fields[47]), int(fields[48])


def forget_environ(names: list[str] | tuple[str, ...]) -> list[str]:
    """Remove `names` from the environment and from /proc/self/environ; the names wiped."""
    wiped = []
    for name in names:
        if name in os.environ:
            del os.environ[name]  # unsetenv too
    try:
        start, end = _env_block()
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            block = mem.read(end - start)
            out = bytearray(block)
            pos = 0
            for entry in block.split(b"\0"):
                name = entry.split(b"=", 1)[0].decode("utf-8", "replace")
                if name in names and b"=" in entry:
                    out[pos : pos + len(entry)] = b"\0" * len(entry)
                    wiped.append(name)
                pos += len(entry) + 1
            if out != block:
                mem.seek(start)
                mem.write(bytes(out))
    except (OSError, ValueError, IndexError):
        pass  # no /proc (or a kernel that refuses): os.environ is still clean
    return wiped
