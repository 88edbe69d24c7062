"""Dropping privileges in the launcher's child, just before exec (the `privileges` layer).

no_new_privs (setuid bits and file capabilities grant nothing), every capability out of the
bounding, ambient, inheritable, permitted and effective sets, and the root-is-special
securebits locked off: a command started by root keeps uid 0 but none of root's powers
(no mknod, mount, CAP_DAC_OVERRIDE reads, ptrace of other users, TIOCSTI on foreign ttys).
"""

from __future__ import annotations

import ctypes
import os
import platform

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 28, 38, 47, 4
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS off, NO_CAP_AMBIENT_RAISE, each with its lock bit
SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x80 | 0x40
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
CAP_V3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def drop_all() -> None:
    """Raises OSError when a capability stays (the launcher then refuses to run the command)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    caps = capabilities()
    if caps.get("CapPrm", 0):  # holding capabilities: drop the bounding set (CAP_SETPCAP)
        for cap in range(_last_cap() + 1):
            if caps.get("CapBnd", 0) >> cap & 1 and libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")
        if os.geteuid() == 0:
            libc.prctl(PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0)
    # (With an empty permitted set, as inside bubblewrap, no_new_privs alone keeps exec from
    # granting root's capabilities again: the kernel caps them at the old permitted set.)
    nr = SYS_CAPSET.get(platform.machine())
    if nr is None:
        raise OSError(f"no capset syscall number for {platform.machine()}")
    header = _CapHeader(CAP_V3, 0)
    data = (_CapData * 2)()
    if libc.syscall(nr, ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def die_with_parent(signum: int) -> None:
    """Ask the kernel to send `signum` when the process that started us dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)


def capabilities() -> dict[str, int]:
    """CapInh/CapPrm/CapEff/CapBnd/CapAmb of this process (for tests and doctor)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Cap"):
                k, v = line.split(":")
                out[k] = int(v.strip(), 16)
    return out
