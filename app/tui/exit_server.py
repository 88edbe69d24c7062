"""Leaving the TUI with a background `m3agent serve` still running (started or reused for a
local model, app/warm.py): say so, with its size and when it stops by itself, and offer to
stop it now. A silent ~1 GB process (the real M3: the GPUs) was the surprise this fixes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from m3agent.engine.api import EngineUnavailable
from m3agent.engine.model_source import resolve_model

from ..serve.lock import find_lock, pid_alive
from ..serve.process import stop_process

if TYPE_CHECKING:
    from ..serve.lock import ServerLock
    from ..settings import Settings


def _rss(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                kib = int(line.split()[1])
                return (
                    f", {kib / (1 << 20):.1f} GB of memory"
                    if kib >= 1 << 20
                    else (f", {kib / 1024:.0f} MB of memory")
                )
    except (OSError, ValueError, IndexError):
        pass
    return ""


def running_server(settings: Settings) -> ServerLock | None:
    """The ready lock of this settings' model server when its process lives, else None."""
    from ..warm import wants_server

    model = settings.model
    if not wants_server(settings) or not model:  # wants_server says yes only with a model
        return None
    try:
        key = resolve_model(model, local_only=True, check=False).key
    except (ValueError, EngineUnavailable):
        return None
    lock = find_lock(settings.home, key)
    return lock if lock is not None and pid_alive(lock.pid) else None


def on_exit(settings: Settings, out: TextIO | None = None, stdin: TextIO | None = None) -> None:
    out = out or sys.stdout
    stdin = stdin or sys.stdin
    lock = running_server(settings)
    if lock is None:
        return
    idle = settings.server_idle_timeout_s
    when = f"it stops after {idle / 60:g} min unused" if idle > 0 else "it keeps running"
    out.write(
        f"the model stays loaded in a background m3agent serve (pid {lock.pid}"
        f"{_rss(lock.pid)}) for the next run; {when}; `m3agent serve --stop` stops it\n"
    )
    if not stdin.isatty():
        return
    out.write("stop it now? [y/N] ")
    out.flush()
    try:
        answer = stdin.readline().strip().lower()
    except (OSError, KeyboardInterrupt):
        answer = ""
    if answer not in ("y", "yes"):
        return

    ok = stop_process(lock.pid)
    out.write(f"stopped pid {lock.pid}\n" if ok else f"pid {lock.pid} did not stop\n")
    out.flush()
