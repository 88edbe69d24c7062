"""Ending a child process for good: wait a while, then SIGKILL, and always reap it."""

from __future__ import annotations

import subprocess
from typing import Any


def wait_or_kill(proc: subprocess.Popen[Any], timeout: float) -> int:
    """Waits up to `timeout` seconds for `proc` to exit, then kills it; its exit status."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
