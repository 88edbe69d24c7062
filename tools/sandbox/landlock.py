"""Landlock's access rights and the kernel's ABI (probed through ctypes).

Landlock only grants, never subtracts: to keep a secret unreadable inside a readable tree,
or `.git` read-only inside the writable workspace, we grant rights on the siblings along
the path instead of on the common parent. The host computes the rules (landlock_rules.py);
the launcher's child applies them (confine.landlock, or the compiled helper).
"""

from __future__ import annotations

import ctypes

SYS_CREATE = 444  # landlock_create_ruleset, the same number on x86_64 and arm64

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK = 1 << 8, 1 << 9, 1 << 10, 1 << 11
MAKE_SYM, REFER, TRUNCATE, IOCTL_DEV = 1 << 12, 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1

FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # rights valid on a file


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
