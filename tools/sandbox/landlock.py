"""Landlock through raw syscalls (ctypes): file-system, TCP and scope rules.

Landlock only grants, never subtracts: to keep a secret unreadable inside a readable tree,
or `.git` read-only inside the writable workspace, we grant rights on the siblings along
the path instead of on the common parent (see `_grant_except`).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446  # same numbers on x86_64 and arm64
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
MAKE_SYM, REFER, TRUNCATE, IOCTL_DEV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1

FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # rights valid on a file


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI (0: unsupported or disabled)."""
    try:
        r = _libc().syscall(SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except (OSError, AttributeError):
        return 0
    return max(int(r), 0)


def handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def read_rights(abi: int) -> int:
    return EXECUTE | READ_FILE | READ_DIR | (IOCTL_DEV if abi >= 5 else 0)


class Ruleset:
    def __init__(self, abi: int, restrict_net: bool) -> None:
        self.abi = abi
        self.fs = handled_fs(abi)
        self.net = (NET_BIND_TCP | NET_CONNECT_TCP) if (restrict_net and abi >= 4) else 0
        self.scoped = (SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL) if abi >= 6 else 0
        attr = _RulesetAttr(self.fs, self.net, self.scoped)
        size = 8 if abi < 4 else (16 if abi < 6 else 24)
        libc = _libc()
        fd = libc.syscall(SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
        self.fd = fd
        self._libc = libc

    def allow(self, path: Path, rights: int) -> None:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # vanished or unreadable: nothing to grant
        try:
            if not os.path.isdir(path):
                rights &= FILE_RIGHTS
            rights &= self.fs
            if not rights:
                return
            attr = _PathBeneath(rights, pfd)
            r = self._libc.syscall(SYS_ADD_RULE, self.fd, RULE_PATH_BENEATH, ctypes.byref(attr), 0)
            if r < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
        finally:
            os.close(pfd)

    def allow_port(self, port: int, rights: int) -> None:
        attr = _NetPort(rights & self.net, port)
        if self._libc.syscall(SYS_ADD_RULE, self.fd, RULE_NET_PORT, ctypes.byref(attr), 0) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule(port {port}): {os.strerror(err)}")

    def grant_except(
        self, root: Path, rights: int, excluded: list[Path], dir_rights: int = 0
    ) -> None:
        """Grant `rights` beneath root, except beneath any path in `excluded`.

        Directories on the way to an excluded path get only `dir_rights` themselves.
        """
        inside = [e for e in excluded if e == root or root in e.parents]
        if not inside:
            self.allow(root, rights)
            return
        if root in inside:
            return
        if dir_rights:
            self.allow(root, dir_rights)
        try:
            names = os.listdir(root)
        except OSError:
            return
        for name in names:
            child = root / name
            if os.path.islink(child):
                continue  # a link is judged where it points; its target has its own rule
            self.grant_except(child, rights, inside, dir_rights)

    def restrict_self(self) -> None:
        libc = self._libc
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(SYS_RESTRICT, self.fd, 0) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
        os.close(self.fd)
