"""The lock file of a running `m3agent serve`: one per model, under <home>/serve/.

It holds the server's pid, address and model, so that `serve --status/--stop` can find it and
`m3agent run` / the TUI can attach to it instead of loading the weights again.

Who holds it is decided by an exclusive `flock` on `<digest>.lock` beside the JSON, taken in one
atomic step and held for the server's lifetime: the kernel drops it when the process dies
(SIGKILL, a reboot), so there is no window in which two starters both win and no stale state
to guess about. The JSON (`<digest>.json`) is only what the holder says about itself, always
replaced whole (written aside, renamed). The `.lock` file is never removed: unlinking a locked
file would let the next starter lock a fresh inode while the old holder still runs.
Everything here is private (0700 directory, 0600 files) whatever the umask.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from m3agent.tools.private_fs import open_private, private_dir


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


def read_lock(path: Path, *, remove_stale: bool = True) -> ServerLock | None:
    """The lock at `path` when its server is alive; a stale or unreadable one is removed
    (it is always written whole, so unreadable means damaged, not half-written)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        lock = ServerLock(**data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        if remove_stale:
            path.unlink(missing_ok=True)
        return None
    if not pid_alive(lock.pid):
        if remove_stale:
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


class HeldLock:
    """The open, flocked `.lock` file: the lock is ours while this is open."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # drops the flock
            self._fd = None


def _write_json(path: Path, lock: ServerLock) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as f:
        json.dump(asdict(lock), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _refusal(model: str, held: ServerLock | None) -> ValueError:
    who = f"pid {held.pid}, {held.address}" if held is not None else "still starting"
    return ValueError(
        f"a server for {model} is already running ({who}); "
        "stop it with `m3agent serve --stop --model ...`"
    )


def acquire(
    home: Path, lock: ServerLock, *, on_taken: Callable[[], None] | None = None
) -> HeldLock:
    """Takes the model's lock (flock, atomic) and writes our JSON; ValueError when a live
    server holds it. Keep the HeldLock open while serving. on_taken runs between taking the
    flock and writing the JSON: tests force two starters to interleave there."""
    path = lock_path(home, lock.model)
    private_dir(path.parent)
    flock_path = path.with_suffix(".lock")
    fd = open_private(flock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _refusal(lock.model, read_lock(path, remove_stale=False)) from None
    except BaseException:
        os.close(fd)
        raise
    held = HeldLock(flock_path, fd)
    try:
        if on_taken is not None:
            on_taken()
        # A server of an older version holds no flock: its live pid in the JSON still counts.
        older = read_lock(path)
        if older is not None and older.pid != lock.pid:
            raise _refusal(lock.model, older)
        _write_json(path, lock)
    except BaseException:
        held.close()
        raise
    return held


def update(home: Path, lock: ServerLock) -> None:
    """Rewrites our own lock's JSON (the port is known only once the socket listens)."""
    _write_json(lock_path(home, lock.model), lock)


def release(home: Path, lock: ServerLock, held: HeldLock | None = None) -> None:
    """Removes our JSON (when it is still ours), then lets go of the flock."""
    path = lock_path(home, lock.model)
    with contextlib.suppress(OSError, ValueError, TypeError):
        if ServerLock(**json.loads(path.read_text(encoding="utf-8"))).pid == lock.pid:
            path.unlink()
    if held is not None:
        held.close()
