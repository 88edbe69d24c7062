"""A workspace's refs read as files, and a revision name resolved to a commit.

Resolving a branch name with `git rev-parse` on the workspace's repository would make git read
its configuration; the rule of tools/safe_git.py is that it never does. So HEAD, loose refs and
packed-refs are read here as plain files, and git is asked only to peel the id found, against
the workspace's objects in UserRepo's private GIT_DIR.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .safe_git import SafeGitError, UserRepo

# A ref or revision name m3agent passes to git: no option (a leading "-"), no range, no
# revision syntax beyond the name itself.
_REF_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-+")
_HEX = frozenset("0123456789abcdefABCDEF")


def plain_name(name: str) -> bool:
    return (
        bool(name)
        and not name.startswith(("-", "/", "."))
        and ".." not in name
        and not name.endswith((".lock", "/"))
        and set(name) <= _REF_CHARS
    )


class RefReader:
    """Refs of a workspace's `.git` read as files (HEAD, loose refs, packed-refs): no git
    runs on the workspace's configuration to resolve a branch name (see the module's rule).
    HEAD is the worktree's own (DOT_GIT); branches and tags are the repository's (COMMON)."""

    def __init__(self, dot_git: Path, common: Path | None = None):
        self.dot_git = dot_git
        self.common = common or dot_git

    def _loose(self, ref: str) -> str | None:
        path = (self.common if ref.startswith("refs/") else self.dot_git) / ref
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return None
            return path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return None

    def _packed(self, ref: str) -> str | None:
        path = self.common / "packed-refs"
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return None
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return None
        for line in lines:
            if line.startswith(("#", "^")):
                continue
            sha, _, name = line.partition(" ")
            if name.strip() == ref:
                return sha.strip()
        return None

    def ref(self, ref: str, depth: int = 0) -> str | None:
        """The object id a full ref name (HEAD, refs/heads/main) points to, or None."""
        if depth > 5 or not plain_name(ref):
            return None
        value = self._loose(ref) or self._packed(ref)
        if value is None:
            return None
        if value.startswith("ref:"):
            return self.ref(value[4:].strip(), depth + 1)
        return value if value and set(value) <= _HEX else None

    def branch_or_tag(self, name: str) -> str | None:
        """NAME as git looks it up: itself, a branch, a tag, a remote-tracking branch."""
        for ref in (name, f"refs/heads/{name}", f"refs/tags/{name}", f"refs/remotes/{name}"):
            found = self.ref(ref)
            if found is not None:
                return found
        return None


def resolve_commit(repo: UserRepo, name: str) -> str | None:
    """The full id of the commit NAME names (a branch, a tag, HEAD, or a commit id, also
    abbreviated), or None when it names none. The refs are read as files; git only peels the
    id it was given against the workspace's objects (in UserRepo's private GIT_DIR)."""
    if not plain_name(name):
        return None
    found = RefReader(repo.dot_git, repo.common).branch_or_tag(name)
    if found is None and 4 <= len(name) <= 64 and set(name) <= _HEX:
        found = name
    if found is None:
        return None
    try:
        out = repo.git(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{found}^{{commit}}"]
        )
    except SafeGitError:
        return None
    return out.decode("ascii", "replace").strip() or None
