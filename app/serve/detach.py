"""`m3agent serve --detach`: start the server in the background and return once it is ready.

The child runs the same command without --detach in a new session (so closing the terminal
does not end it), its output goes to a log file next to the lock, and the parent waits for
the lock to say "ready" (or for the child to die, then shows the log's last lines).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from m3agent.tools.private_fs import open_private, private_dir

from .lock import ServerLock, find_lock, lock_path


def start_detached(
    argv: list[str],
    home: Path,
    model_key: str,
    timeout_s: float = 3600.0,
    *,
    cwd: Path | None = None,
    on_wait: Callable[[], None] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[ServerLock | None, Path, str]:
    """(lock, log path, log tail). lock is None when the server exited or timed out.
    cwd: the server's working directory; on_wait: called between polls (progress);
    env: the server's environment (default: ours)."""
    log_path = lock_path(home, model_key).with_suffix(".log")
    private_dir(log_path.parent)
    # The log holds request paths and errors: the owner's only, whatever the umask.
    with os.fdopen(open_private(log_path, os.O_WRONLY | os.O_TRUNC), "wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-P", "-m", "m3agent.app.cli", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ) if env is None else env,
            cwd=cwd,
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            return None, log_path, log_tail(log_path)
        lock = find_lock(home, model_key)
        if lock is not None and lock.pid == child.pid and lock.state == "ready":
            return lock, log_path, ""
        if on_wait is not None:
            on_wait()
        time.sleep(0.2)
    return None, log_path, f"not ready after {timeout_s:.0f}s; still loading (pid {child.pid})"


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])
