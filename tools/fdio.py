"""File access by descriptor: the file tools open exactly the path they checked.

paths.py checks a canonical path (symlinks and `..` resolved). Re-opening that path by name
would follow whatever a concurrent command swapped in meanwhile (a workspace directory
exchanged with a symlink to `~/.ssh`), so every open here follows *no* symlink at all: the
canonical path has none, and one that appears after the check makes the open fail (ELOOP)
instead of leaving the checked tree. Linux >= 5.6 does the whole walk in one `openat2` with
`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`; older kernels get a walk one component at a time
from a directory descriptor with `O_NOFOLLOW`.

Writes go through the descriptor of the checked directory: the new content is written to an
anonymous `O_TMPFILE` in it (a process killed mid-write leaves nothing behind), linked in
under a temp name and renamed over the target within that same directory descriptor.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
import time
from pathlib import Path

_SYS_OPENAT2 = 437  # the same number on x86_64 and aarch64 (the generic table)
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
TEMP_SUFFIX = ".m3tmp"


class FsRefused(Exception):
    """A path the tools will not open as asked; the message is shown to the model as is."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _openat2(dirfd: int, rel: str, flags: int, mode: int) -> int | None:
    """openat2(dirfd, rel, BENEATH|NO_SYMLINKS); None when the kernel lacks it."""
    libc = ctypes.CDLL(None, use_errno=True)
    creates = (
        flags & os.O_CREAT or flags & os.O_TMPFILE == os.O_TMPFILE
    )  # O_TMPFILE has O_DIRECTORY's bit
    how = _OpenHow(
        flags | os.O_CLOEXEC, mode if creates else 0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS
    )
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    for _ in range(8):  # EAGAIN: a rename raced the walk; the kernel asks for a retry
        fd: int = syscall(
            _SYS_OPENAT2, dirfd, os.fsencode(rel), ctypes.byref(how), ctypes.sizeof(how)
        )
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            return None  # a kernel before 5.6 (or a filter hiding the call)
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), rel)
    raise OSError(errno.EAGAIN, "the path kept changing while it was opened", rel)


def _walk(dirfd: int, parts: list[str], flags: int, mode: int) -> int:
    """The fallback: one O_NOFOLLOW step per component, each from the last one's descriptor."""
    fd = os.dup(dirfd)
    try:
        for name in parts[:-1]:
            # O_PATH|O_NOFOLLOW opens a symlink itself; fstat tells it apart (ELOOP, as openat2)
            nfd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            kind = stat.S_IFMT(os.fstat(nfd).st_mode)
            if kind != stat.S_IFDIR:
                os.close(nfd)
                err = errno.ELOOP if kind == stat.S_IFLNK else errno.ENOTDIR
                raise OSError(err, os.strerror(err), name)
            os.close(fd)
            fd = nfd
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        os.close(fd)


def _parts(path: Path) -> list[str]:
    if not path.is_absolute():
        raise FsRefused(f"{path}: not an absolute path")
    parts = [p for p in path.parts[1:]]
    if any(p in ("", ".", "..") for p in parts):
        raise FsRefused(f"{path}: '.' and '..' are not allowed here")
    return parts


def open_path(path: Path, flags: int, mode: int = 0o666, use_openat2: bool = True) -> int:
    """Open the canonical `path` without following any symlink on the way (ELOOP if one is
    there). `flags` as for os.open; O_CLOEXEC is always added."""
    parts = _parts(path)
    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if not parts:
            return os.open("/", flags | os.O_CLOEXEC)
        if use_openat2:
            fd = _openat2(root, "/".join(parts), flags, mode)
            if fd is not None:
                return fd
        return _walk(root, parts, flags, mode)
    finally:
        os.close(root)


def _why(e: OSError, shown: str) -> FsRefused:
    if e.errno in (errno.ELOOP, errno.EXDEV):
        return FsRefused(
            f"{shown}: a symlink appeared in the path after it was checked (something changed "
            "it during the call); not followed, nothing read or written"
        )
    if e.errno == errno.ENOENT:
        return FsRefused(f"{shown}: no such file or directory")
    if e.errno == errno.ENOTDIR:
        return FsRefused(f"{shown}: a component of the path is not a directory")
    return FsRefused(f"{shown}: {e.strerror or e}")


def open_dir(path: Path, shown: str, use_openat2: bool = True) -> int:
    try:
        return open_path(path, _DIR_FLAGS, use_openat2=use_openat2)
    except OSError as e:
        raise _why(e, shown) from None


def hardlink_refusal(st: os.stat_result, shown: str) -> FsRefused | None:
    """A regular file with other names may be a second name of a secret outside the workspace
    (`backup.ini` linked to `~/.aws/credentials`); the snapshot skips such files, and so do
    the tools. Nothing cheap tells where the other names are, so every such file counts."""
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        return FsRefused(
            f"{shown}: has {st.st_nlink} hard links (it may be another name of a file outside "
            "the workspace); the file tools do not read it"
        )
    return None


def open_regular(path: Path, shown: str, links_ok: bool = False, use_openat2: bool = True) -> int:
    """A read descriptor of the regular file at `path` (O_NONBLOCK: a FIFO never hangs us)."""
    try:
        fd = open_path(path, os.O_RDONLY | os.O_NONBLOCK, use_openat2=use_openat2)
    except OSError as e:
        raise _why(e, shown) from None
    st = os.fstat(fd)
    refusal = None
    if stat.S_ISDIR(st.st_mode):
        refusal = FsRefused(f"{shown}: is a directory")
    elif not stat.S_ISREG(st.st_mode):
        refusal = FsRefused(f"{shown}: not a regular file (a FIFO, socket or device); not read")
    elif not links_ok:
        refusal = hardlink_refusal(st, shown)
    if refusal is not None:
        os.close(fd)
        raise refusal
    return fd


def read_bytes(path: Path, shown: str, links_ok: bool = False, use_openat2: bool = True) -> bytes:
    fd = open_regular(path, shown, links_ok, use_openat2)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def lstat(path: Path) -> os.stat_result | None:
    """The entry at `path` itself (a symlink is not followed); None when absent."""
    try:
        fd = open_path(path.parent, os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        return os.stat(path.name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)


def parent_dir(path: Path, shown: str, create: bool = False, use_openat2: bool = True) -> int:
    """The checked directory of `path`, opened (the caller closes it), creating missing
    directories one by one when `create` (each made with mkdirat in the descriptor above it,
    then opened without following links). Changes made through one such descriptor land in
    that directory even if it is renamed or swapped meanwhile."""
    try:
        return open_path(path.parent, _DIR_FLAGS, use_openat2=use_openat2)
    except FileNotFoundError:
        if not create:
            raise _why(FileNotFoundError(errno.ENOENT, "missing"), shown) from None
    except OSError as e:
        raise _why(e, shown) from None
    fd = open_dir(Path("/"), shown)
    try:
        for name in _parts(path.parent):
            try:
                nfd = _step_dir(fd, name)
            except OSError as e:
                raise _why(e, shown) from None
            os.close(fd)
            fd = nfd
        return os.dup(fd)
    finally:
        os.close(fd)


def _step_dir(fd: int, name: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
    except FileNotFoundError:
        try:
            os.mkdir(name, 0o777, dir_fd=fd)
        except FileExistsError:
            pass  # made by someone else meanwhile: opened below like any other
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)


def read_in(dfd: int, name: str, shown: str) -> tuple[bytes, int] | None:
    """The bytes and permission bits of the regular file `name` in `dfd`; None when absent."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise FsRefused(f"{shown}: not a regular file")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as e:
        raise _why(e, shown) from None
    with os.fdopen(fd, "rb") as f:
        return f.read(), stat.S_IMODE(st.st_mode)


def write_in(dfd: int, name: str, data: bytes, shown: str, mode: int | None = None) -> None:
    """Replace `name` in the directory `dfd` with `data`. An existing file keeps its permission
    bits unless `mode` is given; a new one gets the umask's."""
    try:
        old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None and stat.S_ISDIR(old.st_mode):
        raise FsRefused(f"{shown}: is a directory")
    if mode is None and old is not None and stat.S_ISREG(old.st_mode):
        mode = stat.S_IMODE(old.st_mode)
    if mode is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    _replace_in(dfd, name, data, mode)


def write_atomic(
    path: Path, data: bytes, shown: str, make_parents: bool = False, use_openat2: bool = True
) -> None:
    """Replace `path` with `data` through the checked directory's descriptor. A crash leaves
    the old file or the new one; an existing file keeps its permission bits."""
    dfd = parent_dir(path, shown, make_parents, use_openat2)
    try:
        write_in(dfd, path.name, data, shown)
    finally:
        os.close(dfd)


def _replace_in(dfd: int, name: str, data: bytes, mode: int) -> None:
    tmp = f".{name}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
    try:  # anonymous until linked: a SIGKILL mid-write leaves no name in the workspace
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        named = False
    except OSError:  # a file system without O_TMPFILE: a named temp file in the same dir
        sweep_temps(dfd, name)  # what a killed earlier write left under that name
        fd = os.open(
            tmp,
            os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dfd,
        )
        named = True
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(data)
            f.flush()
            os.fchmod(fd, mode)
            os.fsync(fd)
        if not named:  # a name exists only for the instant between linkat and renameat
            os.link(f"/proc/self/fd/{fd}", tmp, dst_dir_fd=dfd, follow_symlinks=True)
            named = True
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        named = False
    finally:
        os.close(fd)
        if named:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass


STALE_TEMP_S = 60.0


def sweep_temps(dfd: int, name: str) -> list[str]:
    """Remove `.NAME.*.m3tmp` files older than a minute from the directory `dfd` (left by a
    write killed mid-way where O_TMPFILE was not available); the names removed."""
    prefix, gone = f".{name}.", []
    now = time.time()
    with os.scandir(dfd) as it:
        for e in it:
            if not (e.name.startswith(prefix) and e.name.endswith(TEMP_SUFFIX)):
                continue
            try:
                st = e.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and now - st.st_mtime > STALE_TEMP_S:
                    os.unlink(e.name, dir_fd=dfd)
                    gone.append(e.name)
            except OSError:
                continue
    return gone


def unlink_in(dfd: int, name: str, shown: str) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError as e:
        raise _why(e, shown) from None


def unlink(path: Path, shown: str, use_openat2: bool = True) -> None:
    dfd = parent_dir(path, shown, False, use_openat2)
    try:
        unlink_in(dfd, path.name, shown)
    finally:
        os.close(dfd)
