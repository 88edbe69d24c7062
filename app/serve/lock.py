"""The lock file of a running `m3agent serve`: one per model, under <home>/serve/.

It holds the server's pid, address and model, so that `serve --status/--stop` can find it and
`m3agent run` / the TUI can attach to it instead of loading the weights again. A lock whose
pid is gone (a crash, a reboot) is stale and is replaced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ServerLock:
    pid: int
    model: str  # the model key: a resolved local directory
    served_model_name: str
    backend: str
    host: str | None = None
    port: int | None = None
    socket: str | None = None
    max_context_tokens: int = 0
    started_at: float = 0.0
    state: str = "loading"  # "loading" while the weights load, then "ready"

    @property
    def base_url(self) -> str | None:
        """http://host:port/v1 for a TCP server; None for a unix-socket one."""
        if self.port is None:
            return None
        return f"http://{self.host or '127.0.0.1'}:{self.port}/v1"

    @property
    def address(self) -> str:
        return self.base_url or f"unix:{self.socket}"


def serve_dir(home: Path) -> Path:
    return home / "serve"


def lock_path(home: Path, model_key: str) -> Path:
    digest = hashlib.sha256(model_key.encode()).hexdigest()[:16]
    return serve_dir(home) / f"{digest}.json"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, not ours to signal
    # A zombie (exited, not yet reaped by its parent) is not a running server.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def read_lock(path: Path) -> ServerLock | None:
    """The lock at `path` when its server is alive; a stale or unreadable one is removed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        lock = ServerLock(**data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        path.unlink(missing_ok=True)
        return None
    if not pid_alive(lock.pid):
        path.unlink(missing_ok=True)
        return None
    return lock


def find_lock(home: Path, model_key: str) -> ServerLock | None:
    return read_lock(lock_path(home, model_key))


def all_locks(home: Path) -> list[ServerLock]:
    d = serve_dir(home)
    if not d.is_dir():
        return []
    return [lk for p in sorted(d.glob("*.json")) if (lk := read_lock(p)) is not None]


def acquire(home: Path, lock: ServerLock) -> Path:
    """Writes the lock atomically; ValueError when a live server already holds it."""
    path = lock_path(home, lock.model)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            held = read_lock(path)  # removes a stale one
            if held is not None and held.pid != lock.pid:
                raise ValueError(
                    f"a server for {lock.model} is already running (pid {held.pid}, "
                    f"{held.address}); stop it with `m3agent serve --stop --model ...`"
                ) from None
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(lock), f)
        return path
    raise ValueError(f"cannot take the lock {path}")


def update(home: Path, lock: ServerLock) -> None:
    """Rewrites our own lock (the port is known only once the socket listens)."""
    path = lock_path(home, lock.model)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(lock)), encoding="utf-8")
    os.replace(tmp, path)


def release(home: Path, lock: ServerLock) -> None:
    path = lock_path(home, lock.model)
    with contextlib.suppress(OSError, ValueError, TypeError):
        if ServerLock(**json.loads(path.read_text(encoding="utf-8"))).pid == lock.pid:
            path.unlink()
