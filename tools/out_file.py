"""Files m3agent writes at a path the user names: `/export`, `run --output-last-message`, a
project's `.mcp.json` (`m3agent mcp add --scope project`).

The name is the user's, but where it lands is often the workspace, which the model writes: it
may have planted `answer.md -> ~/.bashrc` or `out -> ~/.config` there before the user typed
the name (issue 36, round 5). A plain `open(path, "w")` writes through such links, into a file
outside the workspace, with text the model chose. So every such write goes through `write_out`:

- the directory is opened once and used by descriptor from then on; when the name lies in the
  workspace (or another directory the model writes: `roots`), the directory must really be
  there: a symlink in it leading outside is refused (links above it, the user's own, are
  followed as usual);
- the final name is never followed: the content goes to a new file beside it (a random name,
  `O_EXCL | O_NOFOLLOW`) that is then linked in (a new file) or renamed over the entry itself
  (`replace`), so a planted link is replaced, never its target written;
- the file is created 0600 whatever the umask (an export or an answer holds the conversation);
- outside those directories, a name that is a link, a FIFO or a device (`-o /dev/stdout`, a
  pipe a script reads, the user's own link) is written as named, as an ordinary open would.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

FILE_MODE = 0o600


class OutRefused(OSError):
    """A path `write_out` will not write: `strerror` says why, str() is "PATH: why"."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def _lexically_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _opened_at(fd: int) -> str:
    """Where the directory descriptor `fd` really is."""
    return os.readlink(f"/proc/self/fd/{fd}")


def open_parent(path: Path, roots: Sequence[Path]) -> tuple[int, bool]:
    """(the directory of `path`, opened: the caller closes it; whether it lies in one of
    `roots`, the directories the model writes). OutRefused when the name lies in a root but a
    symlink there leads it out."""
    lexical = os.path.normpath(os.path.abspath(path))
    parent = os.path.dirname(lexical)
    try:
        dfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise OutRefused(e.errno, f"{e.strerror} ({parent})", str(path)) from None
    forms = {f for r in roots for f in (os.path.normpath(os.path.abspath(r)), os.path.realpath(r))}
    if not any(_lexically_within(parent, f) for f in forms):
        return dfd, False
    real = _opened_at(dfd)
    if not any(_lexically_within(real, f) for f in forms):
        os.close(dfd)
        why = f"a symlink in the workspace leads it outside ({real}); not written"
        raise OutRefused(errno.ELOOP, why, str(path))
    return dfd, True


def write_out(
    path: Path,
    data: bytes | str,
    *,
    roots: Sequence[Path],
    replace: bool,
) -> None:
    """`data` as the file `path` (see the module docstring). FileExistsError when an entry of
    that name is there (a dangling link too) and `replace` is not set; OutRefused (an
    OSError) when the path may not be written; any other OSError as it comes."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    name = os.path.basename(os.path.normpath(os.path.abspath(path)))
    dfd, models = open_parent(Path(path), roots)
    try:
        if replace and not models and _special(dfd, name):
            _write_into(dfd, name, raw)
        else:
            _write_whole(dfd, name, raw, path, replace=replace)
    finally:
        os.close(dfd)


def _special(dfd: int, name: str) -> bool:
    """Whether `name` is a link, FIFO or device: outside the directories the model writes,
    the user's own (`-o /dev/stdout`, a pipe a script reads), written as named."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)


def _write_into(dfd: int, name: str, raw: bytes) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=dfd)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):  # a link to the user's own file
            os.ftruncate(fd, 0)
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(raw)
    finally:
        os.close(fd)


def _write_whole(dfd: int, name: str, raw: bytes, path: Path, *, replace: bool) -> None:
    """A new file beside `name` (never through a link), linked in or renamed over it."""
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            FILE_MODE,
            dir_fd=dfd,
        )
        try:
            os.fchmod(fd, FILE_MODE)  # the umask filtered open's mode
            with os.fdopen(fd, "wb", closefd=False) as f:
                f.write(raw)
                f.flush()
                os.fsync(fd)
        finally:
            os.close(fd)
        if replace:  # the entry itself: a link planted there is replaced, not followed
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        else:  # fails if anything has that name, a dangling link included
            try:
                os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            except FileExistsError:
                raise FileExistsError(str(path)) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
