"""Landlock rules for a policy: read all but secrets, write the writable roots but not `.git`."""

from __future__ import annotations

import os
from pathlib import Path

from m3agent.tools.sandbox import boot
from m3agent.tools.sandbox import landlock as ll
from m3agent.tools.sandbox.policy import SandboxMode, SandboxPolicy, hidden_paths

# Devices every program expects to open for writing.
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom")
# Inside bubblewrap /dev is private and its pts instance new: ptys of the command's own.
# Without it /dev/pts holds the user's terminals, so /dev is unreadable but for _DEVICES.
_BWRAP_DEVICES = ("/dev/ptmx", "/dev/pts")


def apply_policy(policy: SandboxPolicy, run_dir: Path, mounts_protect: bool = False) -> None:
    """`mounts_protect`: bubblewrap already binds the protected paths read-only, so the
    writable roots can be granted whole (else creating or deleting entries directly in a
    root is refused, the price of keeping `.git` read-only with Landlock alone)."""
    abi = ll.abi_version()
    if not abi:
        raise OSError("Landlock is not available")
    rs = ll.Ruleset(abi, restrict_net=not policy.network)
    read = ll.read_rights(abi)
    write_all = rs.fs
    unreadable = list(hidden_paths(policy))
    if not mounts_protect:  # (inside bubblewrap the home directory is an empty tmpfs already)
        home = policy.home_dir()
        if home != Path("/"):
            unreadable.append(home)
        unreadable.append(Path("/dev"))  # the user's terminals: no reads, writes or TIOCSTI
    rs.grant_except(Path("/"), read, unreadable, dir_rights=ll.READ_DIR)
    for p in (*policy.home_allowed(), *boot.needed_paths()):
        rs.allow(p, read)  # the toolchain allow-list and the launcher's own files
    if policy.mode is not SandboxMode.READ_ONLY:
        protected = (
            []
            if mounts_protect
            else [p for p in (*policy.protected_paths(), *boot.inside_roots(policy)) if p.exists()]
        )
        for root in policy.writable_roots():
            if mounts_protect:
                rs.allow(root, write_all)
                continue
            if root != policy.workspace:  # an --add-dir: strict only once it holds one
                rs.grant_except(root, write_all, protected, dir_rights=read)
                continue
            # The workspace root gets no write right, whether or not its protected names exist
            # yet (a right on a directory covers everything beneath it, and Landlock cannot
            # deny one name): so `.git` and the rest can be neither changed nor created.
            # Its other children get full rights.
            rs.allow(root, read)
            try:
                names = os.listdir(root)
            except OSError:
                continue
            for name in names:
                child = root / name
                if not os.path.islink(child):
                    rs.grant_except(child, write_all, protected, dir_rights=read)
    for dev in (*_DEVICES, *(_BWRAP_DEVICES if mounts_protect else ())):
        rs.allow(Path(dev), ll.READ_FILE | ll.WRITE_FILE | ll.IOCTL_DEV | ll.TRUNCATE | ll.READ_DIR)
    # /dev/shm (POSIX semaphores, multiprocessing): private inside bubblewrap, so writable
    # there; without it the host's shared one stays read-only.
    rs.allow(Path("/dev/shm"), write_all if mounts_protect else read)
    rs.allow(run_dir, write_all)
    rs.restrict_self()
