"""`--worktree NAME` (Claude Code's): the session runs in its own git worktree, so parallel
sessions of one repository do not edit the same files.

The worktree is `<repo>/.m3agent/worktrees/NAME` on the branch `worktree-NAME`, made from
HEAD by `git worktree add` the first time and reused after that; `/.m3agent/worktrees/` goes
into the repository's `.git/info/exclude`, so the main checkout neither lists nor snapshots
the worktrees' files. It stays when the session ends (`git worktree remove PATH` removes it).

git runs through tools/safe_git.py's `run_git` (no global or system configuration, no hooks,
no pager, no prompt) on the repository's own `.git`, which the sandbox keeps read-only: its
configuration applies (a filter it defines runs on checkout, as with `git worktree add` by
hand). Sessions in the worktree read it through `UserRepo` like any repository
(`safe_git.linked_worktree` checks its `.git` file).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from m3agent.tools.safe_git import SafeGitError, run_git

WORKTREES_DIR = Path(".m3agent") / "worktrees"
BRANCH_PREFIX = "worktree-"
EXCLUDE_LINE = "/.m3agent/worktrees/"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class WorktreeError(ValueError):
    """No worktree for this name here; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Worktree:
    path: Path
    branch: str
    new: bool  # not there yet (plan_worktree), or just made (enter_worktree)
    root: Path  # the repository's

    def describe(self) -> str:
        how = "created" if self.new else "reused"
        return f"worktree {self.path} (branch {self.branch}): {how}"


def repo_root(start: Path) -> Path:
    """The root of the git repository holding START (the directory with a `.git` directory)."""
    here = start.expanduser().resolve()
    for d in (here, *here.parents):
        dot = d / ".git"
        try:
            mode = os.lstat(dot).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode):
            return d
        raise WorktreeError(
            f"{d} is itself a linked worktree or submodule (.git is not a directory): "
            "start --worktree from the main checkout"
        )
    raise WorktreeError(f"--worktree needs a git repository: {here} is not in one")


def plan_worktree(start: Path, name: str) -> Worktree:
    """The worktree NAME of the repository holding START, checked but not made yet."""
    if not _NAME.fullmatch(name) or name.endswith(".lock") or ".." in name:
        raise WorktreeError(
            f"--worktree {name!r}: use letters, digits, '.', '_' and '-' (64 at most), "
            "starting with a letter or digit"
        )
    root = repo_root(start)
    path = root / WORKTREES_DIR / name
    _no_links(root, path)
    if path.exists() and not (path / ".git").is_file():
        raise WorktreeError(f"{path} exists but is not a git worktree: move it away first")
    return Worktree(path, BRANCH_PREFIX + name, new=not path.exists(), root=root)


def _no_links(root: Path, path: Path) -> None:
    """`.m3agent`, `worktrees` and NAME are real directories or absent: a repository can
    commit `.m3agent/worktrees` as a symlink, and `git worktree add` would then check the
    repository's files out wherever it points (outside the repository), or a session would
    run in whatever directory a link named NAME leads to."""
    here = root
    for part in path.relative_to(root).parts:
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            return
        except OSError as e:
            raise WorktreeError(f"cannot use {here}: {e.strerror or e}") from None
        if not stat.S_ISDIR(mode):
            kind = "a symlink" if stat.S_ISLNK(mode) else "not a directory"
            raise WorktreeError(f"{here} is {kind}: worktrees are made only in a real directory")


def enter_worktree(start: Path, name: str) -> Worktree:
    """The worktree NAME of the repository holding START: made if missing, else reused."""
    return make_worktree(plan_worktree(start, name))


def make_worktree(tree: Worktree) -> Worktree:
    """TREE made from HEAD when it is new (its branch reused if it exists)."""
    if not tree.new:
        return tree
    root, path, branch = tree.root, tree.path, tree.branch
    git_dir = root / ".git"
    _exclude(git_dir)
    try:
        run_git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], git_dir=git_dir)
    except SafeGitError:
        raise WorktreeError(
            f"{root} has no commit yet: a worktree starts from one (commit first)"
        ) from None
    try:
        run_git(["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], git_dir=git_dir)
        args = ["worktree", "add", "--quiet", str(path), branch]  # the branch from before
    except SafeGitError:
        args = ["worktree", "add", "--quiet", "-b", branch, str(path), "HEAD"]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_git(args, git_dir=git_dir, work_tree=root)
    except SafeGitError as e:
        raise WorktreeError(f"cannot create the worktree {path}: {e}") from None
    return tree


def _exclude(git_dir: Path) -> None:
    """The worktrees' directory in `.git/info/exclude` (once)."""
    exclude = git_dir / "info" / "exclude"
    try:
        text = exclude.read_text(encoding="utf-8", errors="replace") if exclude.is_file() else ""
        if EXCLUDE_LINE in text.splitlines():
            return
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with exclude.open("a", encoding="utf-8") as f:
            f.write(("" if not text or text.endswith("\n") else "\n") + EXCLUDE_LINE + "\n")
    except OSError as e:
        raise WorktreeError(f"cannot write {exclude}: {e.strerror or e}") from None
