"""A per-command cgroup: a process limit, and a kill that reaches every member.

cgroup v2 (with the pids controller delegated to us) or the v1 `pids` hierarchy. A member
that called setsid or double-forked is still in the group, so the kill catches it.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path


def _v2_root() -> Path | None:
    for cand in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (cand / "cgroup.controllers").exists():
            try:
                rel = next(
                    line.split("::", 1)[1].strip()
                    for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if line.startswith("0::")
                )
            except (OSError, StopIteration):
                return None
            base = cand / rel.lstrip("/")
            ctrl = base / "cgroup.subtree_control"
            try:
                if "pids" in ctrl.read_text().split():
                    return base
            except OSError:
                return None
    return None


def _v1_root() -> Path | None:
    p = Path("/sys/fs/cgroup/pids")
    return p if (p / "cgroup.procs").exists() else None


STALE_S = 600.0


def _sweep(root: Path) -> None:
    """Remove groups left by agents that died mid-command (kill -9): empty and ten minutes old.
    rmdir refuses a group that still has members, so a running command is never touched."""
    now = time.time()
    try:
        entries = [e for e in os.scandir(root) if e.name.startswith("m3agent-") and e.is_dir()]
    except OSError:
        return
    for e in entries:
        try:
            if now - e.stat().st_mtime > STALE_S:
                os.rmdir(e.path)
        except OSError:
            continue


class Cgroup:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_pids: int) -> Cgroup:
        """Make a fresh group with pids.max set; raises OSError where we may not."""
        root = _v2_root() or _v1_root()
        if root is None:
            raise OSError("no writable cgroup with the pids controller")
        _sweep(root)
        path = root / f"m3agent-{uuid.uuid4().hex[:12]}"
        path.mkdir()
        try:
            (path / "pids.max").write_text(str(max_pids))
        except OSError:
            path.rmdir()
            raise
        return cls(path)

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self, deadline_s: float = 5.0) -> None:
        kill_file = self.path / "cgroup.kill"
        if kill_file.exists():
            try:
                kill_file.write_text("1")
            except OSError:
                pass
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:  # v1 has no cgroup.kill; repeat until a forking loop is drained
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill_all()
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)  # members still exiting
