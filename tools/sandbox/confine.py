"""What the launcher's child applies before exec, from a spec the host computed.

This module runs in every sandboxed command's launcher, so it imports only what an
interpreter started with `-I -S` already has or loads in a millisecond (os, resource,
ctypes): no pathlib, json, dataclasses or enum, which cost several times the bubblewrap
start each. The host does the thinking (the policy, which paths get which Landlock rights,
the seccomp program, the rlimit values: landlock_rules.ruleset, seccomp.build_program,
rlimits.pairs); what must be looked at from inside the sandbox's own view of the file
system (which directory entries exist under bubblewrap's mounts) is listed here.
"""

import ctypes
import os

TYPE_CHECKING = False  # typing is not imported here (see above); mypy reads this as its own
if TYPE_CHECKING:
    from m3agent.tools.sandbox.spec import LandlockRuleset, LaunchSpec

SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446  # same numbers on x86_64 and arm64
FILE_RIGHTS = 1 | 2 | 4 | (1 << 14) | (1 << 15)  # rights valid on a file (landlock.py)
PR_SET_NO_NEW_PRIVS = 38


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("e", ctypes.c_uint32), ("p", ctypes.c_uint32), ("i", ctypes.c_uint32)]


def _fail(libc: ctypes.CDLL, what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class _Rules:
    def __init__(self, libc: ctypes.CDLL, ruleset: "LandlockRuleset") -> None:
        self.libc, self.fs = libc, ruleset["fs"]
        attr = _RulesetAttr(ruleset["fs"], ruleset["net"], ruleset["scoped"])
        fd = libc.syscall(SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(ruleset["attr_size"]), 0)
        if fd < 0:
            raise _fail(libc, "landlock_create_ruleset")
        self.fd = fd

    def allow(self, path: str, rights: int) -> None:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # absent in this view of the file system: nothing to grant
        try:
            if not os.path.isdir(path):
                rights &= FILE_RIGHTS
            rights &= self.fs
            if rights:
                attr = _PathBeneath(rights, pfd)
                if self.libc.syscall(SYS_ADD_RULE, self.fd, 1, ctypes.byref(attr), 0) < 0:
                    raise _fail(self.libc, f"landlock_add_rule({path})")
        finally:
            os.close(pfd)

    def grant_except(self, root: str, rights: int, excluded: list[str], dir_rights: int) -> None:
        """`rights` beneath root but beneath no excluded path (Landlock only grants: the
        siblings along the way get the rights, the directories on it only dir_rights)."""
        inside = [e for e in excluded if _under(e, root)]
        if not inside:
            self.allow(root, rights)
            return
        if root in inside:
            return
        if dir_rights:
            self.allow(root, dir_rights)
        self.children(root, rights, inside, dir_rights)

    def children(self, root: str, rights: int, excluded: list[str], dir_rights: int) -> None:
        """grant_except on each entry of root (root itself gets nothing here)."""
        try:
            names = os.listdir(root)
        except OSError:
            return
        for name in names:
            child = root.rstrip("/") + "/" + name
            if not os.path.islink(child):  # a link is judged where it points
                self.grant_except(child, rights, excluded, dir_rights)


def landlock(libc: ctypes.CDLL, ruleset: "LandlockRuleset") -> None:
    rules = _Rules(libc, ruleset)
    for op in ruleset["ops"]:
        if op[0] == "allow":
            rules.allow(*op[1:])
        elif op[0] == "except":
            rules.grant_except(*op[1:])
        elif op[0] == "port":  # TCP connect to one port (allow-list mode: the forwarder)
            attr = _NetPort(op[2], op[1])
            if libc.syscall(SYS_ADD_RULE, rules.fd, 2, ctypes.byref(attr), 0) < 0:
                raise _fail(libc, f"landlock_add_rule(port {op[1]})")
        else:
            rules.children(*op[1:])
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail(libc, "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.syscall(SYS_RESTRICT, rules.fd, 0) < 0:
        raise _fail(libc, "landlock_restrict_self")
    os.close(rules.fd)


def rlimits(pairs: list[tuple[int, int, int]], nproc_extra: int) -> None:
    import resource

    for which, value, hard_extra in pairs:
        if which == resource.RLIMIT_NPROC:
            value += nproc_extra  # RLIMIT_NPROC counts the user's processes already running
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        new_hard = value + hard_extra
        if hard != resource.RLIM_INFINITY:
            new_hard = min(new_hard, hard)
        resource.setrlimit(which, (value, new_hard))


def seccomp(libc: ctypes.CDLL, program: bytes) -> None:
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail(libc, "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, MODE_FILTER
        raise _fail(libc, "prctl(PR_SET_SECCOMP)")


def _caps() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Cap"):
                k, v = line.split(":")
                out[k] = int(v.strip(), 16)
    return out


def drop_privileges(libc: ctypes.CDLL, capset_nr: int, last_cap: int, securebits: int) -> None:
    """no_new_privs, the ambient and bounding sets emptied, root's securebits locked, then
    capset to nothing (privileges.py says why each)."""
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail(libc, "prctl(PR_SET_NO_NEW_PRIVS)")
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    caps = _caps()
    if caps.get("CapPrm", 0):
        for cap in range(last_cap + 1):
            if caps.get("CapBnd", 0) >> cap & 1 and libc.prctl(24, cap, 0, 0, 0) != 0:
                raise _fail(libc, f"prctl(PR_CAPBSET_DROP, {cap})")
        if os.geteuid() == 0:
            libc.prctl(28, securebits, 0, 0, 0)  # PR_SET_SECUREBITS
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if libc.syscall(capset_nr, ctypes.byref(header), data) != 0:
        raise _fail(libc, "capset")


def user_process_count() -> int:
    uid, n = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat("/proc/" + entry).st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def apply(libc: ctypes.CDLL, spec: "LaunchSpec") -> None:
    """In the child: rlimits, then Landlock, then seccomp (last but for the privilege drop,
    since it limits prctl users), then the capabilities."""
    pairs, rules, program, privileges = (
        spec.get("rlimits"),
        spec.get("landlock"),
        spec.get("seccomp"),
        spec.get("privileges"),
    )
    if pairs:
        rlimits(pairs, user_process_count())
    if rules:
        landlock(libc, rules)
    if program:
        seccomp(libc, program)
    if privileges:
        drop_privileges(libc, *privileges)
