"""Stopping a server process and everything it started (vLLM worker processes)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from .lock import pid_alive


def descendants(pid: int) -> list[int]:
    """Child processes, grandchildren first-found order, read from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _wait_gone(pids: list[int], deadline: float, root: int | None = None) -> list[int]:
    """Waits until none of `pids` lives; children `root` starts meanwhile (a vLLM engine core
    spawned while it was still loading) join the wait."""
    family = list(pids)
    while True:
        if root is not None and pid_alive(root):
            family += [c for c in descendants(root) if c not in family]
        left = [p for p in family if pid_alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def stop_process(pid: int, grace_s: float = 30.0) -> bool:
    """SIGTERM, wait up to grace_s for a clean exit, then SIGKILL it and its descendants.
    True when nothing of it is left."""
    family = [pid, *descendants(pid)]
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    left = _wait_gone(family, time.monotonic() + grace_s, root=pid)
    for p in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    return not _wait_gone(left, time.monotonic() + 5.0)
