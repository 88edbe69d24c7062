"""Waiting for an exclusive flock without blocking forever.

An flock is released by the kernel when its holder dies, so a process killed halfway never
leaves a lock behind (a lock *file* would). Callers that must not wait forever poll for it.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable
from typing import IO, Any


def wait_for_flock(
    handle: IO[Any],
    deadline: float,
    while_waiting: Callable[[], None] = lambda: None,
    poll_s: float = 0.2,
) -> bool:
    """Take an exclusive flock on `handle`, polling until `deadline` (time.monotonic());
    False when the deadline passed first. `while_waiting` runs between polls."""
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            while_waiting()
            time.sleep(poll_s)


__all__ = ["wait_for_flock"]
