"""The agent's own git: every git the agent runs outside the sandbox goes through here.

The workspace is untrusted: a cloned repository, or one a model's command has just written.
Git executes programs named in its configuration (core.fsmonitor, filter drivers, hooks,
diff.external, textconv, pagers, credential helpers, ssh commands) and follows include.path /
includeIf to more configuration. Command-line `-c` cannot switch off every such option (a
filter driver has a name chosen by the repository; `include` is always followed), so the rule
here is structural: **git never reads a configuration the workspace can write.**

- `run_git` builds git's environment from scratch: no inherited GIT_* variable (so no
  GIT_CONFIG_PARAMETERS, GIT_DIR, GIT_EXTERNAL_DIFF ...), system and global config off, HOME and
  XDG_CONFIG_HOME pointed at an empty private directory, no pager, no terminal prompt, no
  lazy fetch; GIT_DIR is always explicit, so git never discovers a `.git` on its own. Every call
  also carries `-c` overrides for the options that run programs: defence in depth, should a
  configuration of ours ever gain one.
- Checkpoints (tools/checkpoint.py) use a shadow repository in the private data dir.
- `UserRepo` reads the workspace's own repository *as data*: git runs with a private GIT_DIR
  (our config, no hooks) holding a copy of the workspace's index and info/exclude, with the
  workspace's object directory as GIT_OBJECT_DIRECTORY. The workspace's `.git/config` is
  never opened by a git that acts on it (only its object format is read, by `git config
  --file --no-includes`, which runs nothing).
- A `.git` that is a file (`gitdir: ...`, submodules too) or a symlink is refused
  (`RepoRefused`): it may point anywhere, including a directory the sandbox could write.
  Callers fall back to a plain directory walk. The one `.git` file followed is a linked
  worktree's as `git worktree add` writes it (`--worktree`), checked both ways: it names
  `<repo>/.git/worktrees/<name>`, whose `gitdir` file names this `.git` back and whose
  `commondir` is that `<repo>/.git`, a directory outside the workspace (`linked_worktree`).
  Read as data like any other: its HEAD and index, the common directory's objects and
  exclude file; no configuration of either runs.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypedDict

from .host_programs import host_path

# Options that make git run a program, each forced off on every call. ("" resets a list, e.g.
# credential.helper; "false"/":" are commands that do nothing.)
OVERRIDES: tuple[str, ...] = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.pager=cat",
    "core.editor=:",
    "sequence.editor=:",
    "core.askPass=",
    "core.sshCommand=false",
    "core.gitProxy=",
    "core.alternateRefsCommand=",
    "credential.helper=",
    "diff.external=",
    "protocol.allow=never",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "gpg.program=false",
    "submodule.recurse=false",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.quotePath=false",
    "color.ui=false",
)
DIFF_FLAGS: tuple[str, ...] = ("--no-ext-diff", "--no-textconv", "--no-color")
_INDEX_MAX_BYTES = 512 * 1024 * 1024  # a bigger "index" is not one we copy
_EXCLUDE_MAX_BYTES = 1024 * 1024
_IDENTITY = {
    "GIT_AUTHOR_NAME": "m3agent",
    "GIT_AUTHOR_EMAIL": "m3agent@localhost",
    "GIT_COMMITTER_NAME": "m3agent",
    "GIT_COMMITTER_EMAIL": "m3agent@localhost",
}


class SafeGitError(Exception):
    """A git step failed or was refused; the message names the step and git's error."""


class RepoRefused(SafeGitError):
    """The workspace's repository is not one the agent's git will read (e.g. `.git` is a file)."""


def git_env(scratch: Path, **extra: str) -> dict[str, str]:
    """git's whole environment: nothing inherited but PATH (to find git) and the locale."""
    env = {
        "PATH": host_path(roots=(extra.get("GIT_WORK_TREE"),)),  # no git the model planted
        "HOME": str(scratch),
        "XDG_CONFIG_HOME": str(scratch),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_SYSTEM": os.devnull,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_PAGER": "cat",
        "PAGER": "cat",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_NO_LAZY_FETCH": "1",
        "GIT_PROTOCOL_FROM_USER": "0",
        **_IDENTITY,
    }
    env.update(extra)
    return env


class GitPlaces(TypedDict):
    """run_git's location arguments for a borrowed repository (SafeRepo._borrowed)."""

    git_dir: Path
    work_tree: Path
    index_file: Path
    object_dir: Path


def run_git(
    args: Sequence[str],
    *,
    git_dir: Path | None,
    work_tree: Path | None = None,
    index_file: Path | None = None,
    object_dir: Path | None = None,
    input: bytes | None = None,
    timeout: float = 120.0,
) -> bytes:
    """git's stdout; SafeGitError when git is missing, times out or fails.

    Files git creates get mode 0600/0700 (umask 077): they land in the private data dir."""
    extra: dict[str, str] = {}
    if git_dir is not None:
        extra["GIT_DIR"] = str(git_dir)
    if work_tree is not None:
        extra["GIT_WORK_TREE"] = str(work_tree)
    if index_file is not None:
        extra["GIT_INDEX_FILE"] = str(index_file)
    if object_dir is not None:
        extra["GIT_OBJECT_DIRECTORY"] = str(object_dir)
    cmd = ["git", "--no-pager"]
    for opt in OVERRIDES:
        cmd += ["-c", opt]
    cmd += list(args)
    step = args[0] if args else "git"
    with tempfile.TemporaryDirectory(prefix="m3agent-git-") as scratch:
        if git_dir is None:  # (init, config --file): no repository discovery above scratch
            extra["GIT_CEILING_DIRECTORIES"] = str(Path(scratch).parent)
        try:
            proc = subprocess.run(
                cmd,
                cwd=str(work_tree or git_dir or scratch),
                env=git_env(Path(scratch), **extra),
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                umask=0o077,
            )
        except FileNotFoundError:
            raise SafeGitError("git is not installed") from None
        except subprocess.TimeoutExpired:
            raise SafeGitError(f"git {step} took longer than {timeout:g} s") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise SafeGitError(f"git {step} failed: {err[-1] if err else proc.returncode}")
    return proc.stdout


def _copy_regular(src: Path, dst: Path, cap: int) -> bool:
    """Copy `src` if it is a regular file (never through a symlink, never a FIFO) of at most
    `cap` bytes; False when it is absent or not such a file."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return False
        with open(dst, "wb") as out:
            shutil.copyfileobj(f, out)
    # The index's own mtime is how git tells racily-clean entries (same size, same second)
    # from clean ones: the copy must keep it, or such an edit would look unchanged.
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
    return True


def _small_text(path: Path, cap: int = 4096) -> str | None:
    """A small regular file's text (a `.git` file, a worktree's `gitdir`), else None."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return None
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def linked_worktree(workspace: Path) -> tuple[Path, Path] | None:
    """(the worktree's own git directory, the repository's `.git`) when WORKSPACE/.git is a
    linked worktree's `.git` file as `git worktree add` wrote it, else None. Both links are
    checked: the file names `<repo>/.git/worktrees/<name>`, that directory's `gitdir` names
    this `.git` back and its `commondir` is `<repo>/.git`, a real directory outside the
    workspace (which a sandboxed command may write)."""
    ws = Path(os.path.realpath(workspace))
    text = _small_text(ws / ".git")
    if text is None or not text.startswith("gitdir:"):
        return None
    own = Path(os.path.realpath(ws / text[len("gitdir:") :].strip()))
    common = own.parent.parent
    if own.parent.name != "worktrees" or common.name != ".git" or ws in (common, *common.parents):
        return None
    back = _small_text(own / "gitdir")
    commondir = _small_text(own / "commondir")
    if back is None or commondir is None:
        return None
    if os.path.realpath(own / back) != str(ws / ".git"):
        return None
    if os.path.realpath(own / commondir) != str(common) or os.path.islink(common):
        return None
    if not (own / "HEAD").is_file() or not (common / "objects").is_dir():
        return None
    return own, common


def dot_git_refusal(workspace: Path) -> str | None:
    """Why the workspace's `.git` is not read (None: a plain directory, a linked worktree's
    checked `.git` file, or no .git at all)."""
    dot = Path(workspace) / ".git"
    try:
        st = os.lstat(dot)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return ".git is a symlink; m3agent's git does not follow it"
    if stat.S_ISREG(st.st_mode):
        if linked_worktree(Path(workspace)) is not None:
            return None
        return ".git is a file (gitdir: ...); m3agent's git does not follow it"
    if not stat.S_ISDIR(st.st_mode):
        return ".git is not a directory"
    return None


class UserRepo:
    """The workspace's own repository, read as data by a git that runs none of its code."""

    def __init__(
        self,
        workspace: Path,
        dot_git: Path,
        identity: tuple[int, int],
        common: Path | None = None,
    ):
        self.workspace = workspace
        self.dot_git = dot_git  # HEAD and index (a linked worktree's own directory)
        self.common = common or dot_git  # objects, refs, exclude, the object format
        self._identity = identity  # of workspace/.git, a directory or a worktree's file

    @classmethod
    def open(cls, workspace: Path) -> UserRepo | None:
        """None without a `.git` directory; RepoRefused for a `.git` file or symlink (but a
        linked worktree's, checked by `linked_worktree`)."""
        ws = Path(os.path.realpath(workspace))
        why = dot_git_refusal(ws)
        if why is not None:
            raise RepoRefused(why)
        dot = ws / ".git"
        try:
            st = os.lstat(dot)
        except OSError:
            return None
        if stat.S_ISREG(st.st_mode):
            linked = linked_worktree(ws)
            if linked is None:  # changed since dot_git_refusal looked
                raise RepoRefused(".git is a file (gitdir: ...); m3agent's git does not follow it")
            return cls(ws, linked[0], (st.st_dev, st.st_ino), linked[1])
        if not (dot / "HEAD").is_file() or not (dot / "objects").is_dir():
            return None
        return cls(ws, dot, (st.st_dev, st.st_ino))

    def _check_same(self) -> None:
        """The `.git` is still what was seen at open (not swapped for a link or a file)."""
        dot = self.workspace / ".git"
        try:
            st = os.lstat(dot)
        except OSError:
            raise RepoRefused(".git has gone since the repository was opened") from None
        same_kind = (
            stat.S_ISREG(st.st_mode) if self.common != self.dot_git else stat.S_ISDIR(st.st_mode)
        )
        if not same_kind or (st.st_dev, st.st_ino) != self._identity:
            raise RepoRefused(".git was replaced since the repository was opened")

    def _object_format(self) -> str:
        config = self.common / "config"
        try:  # only a regular file is read (a FIFO there would block git)
            if not stat.S_ISREG(os.lstat(config).st_mode):
                return "sha1"
        except OSError:
            return "sha1"
        try:
            out = run_git(
                [
                    "config",
                    "--file",
                    str(config),
                    "--no-includes",
                    "--get",
                    "extensions.objectformat",
                ],
                git_dir=None,
                timeout=20,
            )
        except SafeGitError:  # not set (exit 1), or no config file: SHA-1
            return "sha1"
        fmt = out.decode("ascii", "replace").strip().lower()
        return fmt if fmt in ("sha1", "sha256") else "sha1"

    @contextmanager
    def _borrowed(self) -> Iterator[GitPlaces]:
        """A private GIT_DIR holding copies of the index (and split-index parts) and
        info/exclude; the workspace's object directory is read in place."""
        self._check_same()
        with tempfile.TemporaryDirectory(prefix="m3agent-repo-") as tmp:
            gd = Path(tmp) / "git"
            (gd / "refs").mkdir(parents=True)
            (gd / "info").mkdir()
            (gd / "HEAD").write_text("ref: refs/heads/m3agent-none\n")
            fmt = self._object_format()
            config = "[core]\n\tbare = false\n"
            if fmt != "sha1":
                config += "\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n"
            else:
                config += "\trepositoryformatversion = 0\n"
            (gd / "config").write_text(config)
            index = gd / "index"
            _copy_regular(self.dot_git / "index", index, _INDEX_MAX_BYTES)
            for part in self.dot_git.glob("sharedindex.*"):
                _copy_regular(part, gd / part.name, _INDEX_MAX_BYTES)
            _copy_regular(
                self.common / "info" / "exclude", gd / "info" / "exclude", _EXCLUDE_MAX_BYTES
            )
            objects = self.common / "objects"
            if os.path.islink(objects) or not objects.is_dir():
                raise RepoRefused(".git/objects is not a directory")
            yield {
                "git_dir": gd,
                "work_tree": self.workspace,
                "index_file": index,
                "object_dir": objects,
            }

    def git(self, args: Sequence[str], timeout: float = 60.0) -> bytes:
        with self._borrowed() as where:
            return run_git(args, timeout=timeout, **where)

    def list_files(self, timeout: float = 60.0) -> tuple[list[str], set[str]]:
        """(tracked plus untracked-not-ignored files, the modified or untracked ones)."""
        with self._borrowed() as where:
            listed = run_git(
                ["ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                timeout=timeout,
                **where,
            )
            changed = run_git(
                ["ls-files", "-z", "--modified", "--others", "--exclude-standard"],
                timeout=timeout,
                **where,
            )
        files = sorted({p for p in listed.decode("utf-8", "surrogateescape").split("\0") if p})
        return files, {p for p in changed.decode("utf-8", "surrogateescape").split("\0") if p}

    def diff(self, timeout: float = 20.0) -> str:
        """`git diff` (work tree against the index), no external diff, textconv or colour."""
        return self.git(["diff", *DIFF_FLAGS], timeout).decode("utf-8", "replace")
