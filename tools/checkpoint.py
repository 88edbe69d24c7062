"""Checkpoints: snapshots of the workspace in a shadow git directory, and restore.

The shadow repository lives in the state dir (GIT_DIR there, GIT_WORK_TREE = workspace) with
its own index, so the user's `.git`, index and branches are never read or written. Files the
workspace's .gitignore excludes are not snapshotted (and so not restored).
"""

from __future__ import annotations

import builtins  # `list` below is also a method name, which shadows it in the class body
import fcntl
import functools
import hashlib
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from .private_fs import DIR_MODE, fix_tree, private_dir
from .safe_git import SafeGitError, run_git

REF = "refs/m3agent/checkpoints"
_EXCLUDE = ".m3agent/\n"
SAVED_REF = "refs/m3agent/before-restore"  # the tree as it was before the last restore


T = TypeVar("T")
P = ParamSpec("P")


class CheckpointError(Exception):
    """A snapshot or restore failed; the message names the git step and its error."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    id: str
    label: str
    created: int  # unix seconds


def state_dir_for(workspace: Path, checkpoints_root: Path) -> Path:
    """`<checkpoints_root>/<hash of the resolved workspace path>`."""
    digest = hashlib.sha256(str(Path(workspace).resolve()).encode()).hexdigest()[:16]
    return Path(checkpoints_root) / digest


def _exclusive(
    method: Callable[Concatenate[Checkpoints, P], T],
) -> Callable[Concatenate[Checkpoints, P], T]:
    """One m3agent at a time on a shadow repository (a flock, released by the kernel when a
    process dies). Holding it, a git lock file left behind is stale: a process killed mid-git
    (kill -9, power loss) must not break every later checkpoint and undo."""

    @functools.wraps(method)
    def run(self: Checkpoints, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if self._lock_depth:
            return method(self, *args, **kwargs)
        private_dir(self.state_dir)
        fd = os.open(self.state_dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            for stale in [
                self.state_dir / "index.lock",
                *self.git_dir.glob("*.lock"),
                *self.git_dir.glob("refs/**/*.lock"),
            ]:
                stale.unlink(missing_ok=True)
            self._lock_depth += 1
            try:
                return method(self, *args, **kwargs)
            finally:
                self._lock_depth -= 1
        finally:
            os.close(fd)  # (releases the flock)

    return run


class Checkpoints:
    def __init__(self, workspace: Path, state_dir: Path) -> None:
        self.workspace = Path(workspace).resolve()
        self.state_dir = Path(state_dir)
        self.git_dir = self.state_dir / "shadow.git"
        self._lock_depth = 0

    # -- git plumbing --------------------------------------------------------------------
    def _git(self, *args: str, input: bytes | None = None, bare: bool = False) -> str:
        """git on the shadow repository, through tools/safe_git.py: a from-scratch environment,
        no system/global config, and the shadow's own config (ours) as the only one read. The
        workspace's .git/config is never read, so its hooks, fsmonitor and filters never run."""
        try:
            out = run_git(
                args,
                git_dir=None if bare else self.git_dir,
                work_tree=None if bare else self.workspace,
                index_file=None if bare else self.state_dir / "index",
                input=input,
                timeout=300,
            )
        except SafeGitError as e:
            raise CheckpointError(f"checkpoint: {e}") from None
        return out.decode("utf-8", "replace")

    def _ensure(self) -> None:
        if not self.workspace.is_dir():
            raise CheckpointError(f"workspace {self.workspace} is not a directory")
        if (self.git_dir / "HEAD").exists():
            self._make_private()
            return
        private_dir(self.state_dir)  # (and the checkpoints root); git's files: umask 077
        # No template: no sample hooks, nothing copied from the system's git installation.
        self._git("init", "-q", "--bare", "--template=", str(self.git_dir), bare=True)
        self._git("config", "core.bare", "false")
        # The workspace's own state folder and nested VCS dirs are not ours to snapshot.
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        (info / "exclude").write_text(_EXCLUDE)
        (self.state_dir / "workspace").write_text(str(self.workspace) + "\n")
        fix_tree(self.state_dir)

    def _make_private(self) -> None:
        """A shadow repository an older version made world-readable is fixed on first use."""
        if stat.S_IMODE(os.stat(self.git_dir).st_mode) != DIR_MODE:
            private_dir(self.state_dir.parent)
            fix_tree(self.state_dir)

    def _exclude_nested_repositories(self) -> None:
        """A repository inside the workspace (a submodule, or one a command made) is not ours
        to snapshot, and `git add` stops at one with no commit: exclude each by path."""
        others = self._git("ls-files", "-z", "--others", "--exclude-standard")
        nested = [p for p in others.split("\x00") if p.endswith("/")]  # git marks repos so
        lines = "".join("/" + re.sub(r"([\\*?\[!#])", r"\\\1", p) + "\n" for p in nested)
        if lines:
            path = self.git_dir / "info" / "exclude"
            path.write_text(path.read_text() + lines)

    def _head(self, ref: str = REF) -> str | None:
        try:
            return self._git("rev-parse", "-q", "--verify", ref).strip() or None
        except CheckpointError:
            return None

    # -- public API ----------------------------------------------------------------------
    @_exclusive
    def snapshot(self, label: str, ref: str = REF) -> str:
        """Record the workspace as it is now; returns the checkpoint id (a commit hash)."""
        self._ensure()
        self._exclude_nested_repositories()
        self._git("add", "-A", "--", ".")
        tree = self._git("write-tree").strip()
        parent = self._head(ref)
        args = ["commit-tree", "--no-gpg-sign", tree, "-m", label or "checkpoint"]
        if parent:
            args += ["-p", parent]
        commit = self._git(*args).strip()
        self._git("update-ref", ref, commit)
        return commit

    def list(self) -> list[Checkpoint]:
        """Newest first."""
        if not (self.git_dir / "HEAD").exists():
            return []
        return self._list()

    @_exclusive
    def _list(self) -> builtins.list[Checkpoint]:
        self._make_private()
        if self._head() is None:
            return []
        out = self._git("log", "--format=%H%x00%ct%x00%s", REF)
        rows = []
        for line in out.splitlines():
            cid, ts, label = line.split("\x00", 2)
            rows.append(Checkpoint(cid, label, int(ts)))
        return rows

    @_exclusive
    def restore(self, checkpoint_id: str) -> builtins.list[str]:
        """Make the workspace match the checkpoint; returns the paths that were removed.

        Files changed since are rewritten, files deleted since come back, files created since
        (and not ignored) are removed. The checkpoint and every newer one leave the list (so a
        second undo steps further back); the tree as it was before is kept under SAVED_REF.
        """
        self._ensure()
        try:
            target = self._git("rev-parse", "--verify", f"{checkpoint_id}^{{commit}}").strip()
        except CheckpointError:
            raise CheckpointError(f"no checkpoint {checkpoint_id!r} for {self.workspace}") from None
        if target not in {c.id for c in self.list()}:
            raise CheckpointError(f"no checkpoint {checkpoint_id!r} for {self.workspace}")
        self.snapshot(f"before restore to {target[:12]}", ref=SAVED_REF)
        self._git("read-tree", target)
        removed = []
        extra = self._git("ls-files", "-z", "--others", "--exclude-standard")
        for rel in filter(None, extra.split("\x00")):
            p = self.workspace / rel
            try:
                p.unlink()
                removed.append(rel)
            except OSError:
                continue
        self._git("checkout-index", "-a", "-f")
        self._prune_empty_dirs(removed)
        parent = self._git("log", "-1", "--format=%P", target).split()
        if parent:
            self._git("update-ref", REF, parent[0])
        else:
            self._git("update-ref", "-d", REF)
        return removed

    def _prune_empty_dirs(self, removed: builtins.list[str]) -> None:
        dirs = sorted(
            {str(Path(r).parent) for r in removed if Path(r).parent != Path(".")},
            key=lambda d: -d.count("/"),
        )
        for d in dirs:
            p = self.workspace / d
            while p != self.workspace:
                try:
                    p.rmdir()
                except OSError:
                    break
                p = p.parent
