"""The `privileges` layer, the host's part: what the launcher's child needs to drop them.

no_new_privs (setuid bits and file capabilities grant nothing), every capability out of the
bounding, ambient, inheritable, permitted and effective sets, and the root-is-special
securebits locked off: a command started by root keeps uid 0 but none of root's powers
(no mknod, mount, CAP_DAC_OVERRIDE reads, ptrace of other users, TIOCSTI on foreign ttys).
The child applies it just before exec (confine.drop_privileges, or the compiled helper) from
the numbers `numbers` computes here.
"""

from __future__ import annotations

import platform

# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS off, NO_CAP_AMBIENT_RAISE, each with its lock bit
SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x80 | 0x40
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def numbers() -> tuple[int, int, int]:
    """(capset syscall number, the highest capability number, securebits) for the child."""
    nr = SYS_CAPSET.get(platform.machine())
    if nr is None:
        raise OSError(f"no capset syscall number for {platform.machine()}")
    return nr, _last_cap(), SECUREBITS
