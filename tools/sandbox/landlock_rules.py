"""Landlock rules for a policy: read all but secrets, write the writable roots but not `.git`."""

from __future__ import annotations

from pathlib import Path

from m3agent.tools.sandbox import boot
from m3agent.tools.sandbox import landlock as ll
from m3agent.tools.sandbox.policy import SandboxMode, SandboxPolicy, hidden_paths
from m3agent.tools.sandbox.spec import LandlockOp, LandlockRuleset

# Devices every program expects to open for writing.
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom")
# Inside bubblewrap /dev is private and its pts instance new: ptys of the command's own.
# Without it /dev/pts holds the user's terminals, so /dev is unreadable but for _DEVICES.
_BWRAP_DEVICES = ("/dev/ptmx", "/dev/pts")


def ruleset(policy: SandboxPolicy, run_dir: Path, mounts_protect: bool = False) -> LandlockRuleset:
    """The Landlock ruleset for `policy`, computed on the host, for confine.landlock to apply
    in the launcher's child. Directory listings ("except", "children") are left to the
    child: under bubblewrap its view of the file system is not the host's.

    `mounts_protect`: bubblewrap already binds the protected paths read-only, so the
    writable roots can be granted whole (else creating or deleting entries directly in a
    root is refused, the price of keeping `.git` read-only with Landlock alone)."""
    abi = ll.abi_version()
    if not abi:
        raise OSError("Landlock is not available")
    fs = ll.handled_fs(abi)
    net = (ll.NET_BIND_TCP | ll.NET_CONNECT_TCP) if (not policy.network and abi >= 4) else 0
    scoped = (ll.SCOPE_ABSTRACT_UNIX | ll.SCOPE_SIGNAL) if abi >= 6 else 0
    ops: list[LandlockOp] = []
    read = ll.read_rights(abi)
    write_all = fs
    unreadable = [str(p) for p in hidden_paths(policy)]
    if not mounts_protect:  # (inside bubblewrap the home directory is an empty tmpfs already)
        home = policy.home_dir()
        if home != Path("/"):
            unreadable.append(str(home))
        unreadable.append("/dev")  # the user's terminals: no reads, writes or TIOCSTI
    ops.append(("except", "/", read, unreadable, ll.READ_DIR))
    for p in (*policy.home_allowed(), *boot.needed_paths()):
        ops.append(("allow", str(p), read))  # the toolchain allow-list and the launcher
    if policy.mode is not SandboxMode.READ_ONLY:
        protected = (
            []
            if mounts_protect
            else [
                str(p)
                for p in (*policy.protected_paths(), *boot.inside_roots(policy))
                if p.exists()
            ]
        )
        # Without bubblewrap a secret inside a root (a deny_read rule there) must be left out
        # of the root's grants too: they are the rights beneath it, reads included.
        protected = [*protected, *([] if mounts_protect else unreadable)]
        for root in policy.writable_roots():
            if mounts_protect:
                ops.append(("allow", str(root), write_all))
            elif root != policy.workspace:  # an --add-dir: strict only once it holds one
                ops.append(("except", str(root), write_all, protected, read))
            else:
                # The workspace root gets no write right, whether or not its protected names
                # exist yet (a right on a directory covers everything beneath it, and
                # Landlock cannot deny one name): so `.git` and the rest can be neither
                # changed nor created. Its other children get full rights.
                ops.append(("except", str(root), read, unreadable, ll.READ_DIR))
                ops.append(("children", str(root), write_all, protected, read))
    for dev in (*_DEVICES, *(_BWRAP_DEVICES if mounts_protect else ())):
        ops.append(
            ("allow", dev, ll.READ_FILE | ll.WRITE_FILE | ll.IOCTL_DEV | ll.TRUNCATE | ll.READ_DIR)
        )
    # /dev/shm (POSIX semaphores, multiprocessing): private inside bubblewrap, so writable
    # there; without it the host's shared one stays read-only.
    ops.append(("allow", "/dev/shm", write_all if mounts_protect else read))
    ops.append(("allow", str(run_dir), write_all))
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    return {"fs": fs, "net": net, "scoped": scoped, "attr_size": size, "ops": ops}
