"""Private files: directories 0700, files 0600, whatever the umask.

Session logs hold whole conversations (tool output included), checkpoints hold copies of the
workspace (its `.env` too), the config file holds API keys and MCP servers' tokens (`m3agent
mcp add -e TOKEN=...`), trust and permission files decide what runs, the prompt history, the
snapshot cache, pasted images and MCP media hold the user's data: other users of the machine
must not read them. Every writer of such a file goes through this module: `private_dir` for
its directory, `open_private` / `write_private` / `append_private` for the file. Everything is
created with these modes whatever the umask (never readable by others, not even for the
instant between a create and a chmod), and what an older version left world-readable is fixed
when it is opened. The process umask is never changed: files the tools write in the workspace
keep the user's usual modes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import TextIO

DIR_MODE = 0o700
FILE_MODE = 0o600


def _fix(path: Path, st: os.stat_result) -> None:
    if st.st_uid != os.geteuid() or os.path.realpath(path) == "/":
        return  # not ours to change (and chmod would fail), or the root (never)
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        if st.st_mode & stat.S_ISVTX:  # a shared sticky directory such as /tmp: never
            return
        if mode != DIR_MODE:
            os.chmod(path, DIR_MODE)
    elif stat.S_ISREG(st.st_mode) and mode & 0o077:
        os.chmod(path, mode & 0o700)  # drop group/other, keep the owner's bits (0400 stays)


def private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) as 0700; an existing one is set to 0700."""
    path = make_dirs(path)
    fix_mode(path)
    return path


def make_dirs(path: Path) -> Path:
    """Create the missing directories of `path` as 0700; existing ones are left as they are
    (the parent of a config file named by $M3AGENT_CONFIG may be the user's home)."""
    path = Path(path)
    missing = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            pass
        os.chmod(d, DIR_MODE)  # mkdir's mode is filtered by the umask
    return path


def fix_mode(path: Path) -> None:
    """0700 for a directory, no group/other bits for a file; missing or foreign: left alone."""
    try:
        st = os.stat(path)
    except OSError:
        return
    _fix(Path(path), st)


def fix_tree(root: Path) -> None:
    """fix_mode on `root` and everything beneath it (symlinks are not followed)."""
    root = Path(root)
    fix_mode(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not stat.S_ISLNK(st.st_mode):
                _fix(p, st)


def open_private(path: Path, flags: int) -> int:
    """os.open with mode 0600 (O_CREAT implied), never through a final symlink; an existing
    file is set to 0600."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, data: bytes | str) -> None:
    """Replace the file at `path` (a symlink's target: the user's own config may be one) with
    `data` as a 0600 file: written to a temp file made 0600 beside it, fsynced and renamed
    over it, so a crash leaves the old content or the new and nobody else can read either.
    Missing directories are made 0700 (make_dirs)."""
    path = Path(os.path.realpath(path))
    make_dirs(path.parent)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def append_private(path: Path) -> TextIO:
    """`path` opened for appending text, created 0600 (an existing one made 0600, missing
    directories 0700); the caller closes it."""
    make_dirs(Path(path).parent)
    return os.fdopen(open_private(Path(path), os.O_WRONLY | os.O_APPEND), "a", encoding="utf-8")
