"""A seccomp-BPF filter assembled in Python.

Refused with EPERM (which Landlock never answers, so a test can tell the layers apart):
ptrace, process_vm_*, io_uring, bpf, perf_event_open, kexec_load; chown and xattr writes
(but in full-access mode);
the terminal-injection ioctls TIOCSTI and TIOCLINUX; and every socket family except an
allow-list: AF_UNIX (only where bubblewrap hides the host's sockets), and with the network on
AF_INET, AF_INET6 and NETLINK_ROUTE (glibc's getaddrinfo asks it which address families
exist). AF_VSOCK, AF_PACKET, AF_ALG, AF_BLUETOOTH, other netlink protocols... are refused.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
from typing import Literal, TypeAlias

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "io_uring_setup",
    "kexec_load",
    "bpf",
    "perf_event_open",
)
# File metadata no path rule covers (refused in the confining modes, not in full-access)
_METADATA = (
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "setxattrat",
    "removexattrat",
)
# name -> syscall number per architecture (aarch64 has no chown/lchown: fchownat only)
SYSCALLS = {
    "x86_64": {
        "ptrace": 101,
        "socket": 41,
        "ioctl": 16,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "io_uring_setup": 425,
        "kexec_load": 246,
        "bpf": 321,
        "perf_event_open": 298,
        "chown": 92,
        "fchown": 93,
        "lchown": 94,
        "fchownat": 260,
        "setxattr": 188,
        "lsetxattr": 189,
        "fsetxattr": 190,
        "removexattr": 197,
        "lremovexattr": 198,
        "fremovexattr": 199,
        "setxattrat": 463,
        "removexattrat": 466,
    },
    "aarch64": {
        "ptrace": 117,
        "socket": 198,
        "ioctl": 29,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "io_uring_setup": 425,
        "kexec_load": 104,
        "bpf": 280,
        "perf_event_open": 241,
        "fchown": 55,
        "fchownat": 54,
        "setxattr": 5,
        "lsetxattr": 6,
        "fsetxattr": 7,
        "removexattr": 14,
        "lremovexattr": 15,
        "fremovexattr": 16,
        "setxattrat": 463,
        "removexattrat": 466,
    },
}
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
NETLINK_ROUTE = 0
TIOCSTI, TIOCLINUX = 0x5412, 0x541C

LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
RET_ALLOW, RET_KILL_PROCESS = 0x7FFF0000, 0x80000000
RET_EPERM = 0x00050000 | errno.EPERM
X32_BIT = 0x40000000
# seccomp_data offsets: nr 0, arch 4, args[i] at 16 + 8 i (the low 32 bits on little endian,
# which is all the kernel reads of an int family or an unsigned int ioctl request)
NR, ARCH = 0, 4


def _arg(i: int) -> int:
    return 16 + 8 * i


def supported() -> str | None:
    """None when a filter can be built here, else the reason."""
    if platform.system() != "Linux":
        return "seccomp is Linux only"
    if platform.machine() not in AUDIT_ARCH:
        return f"no syscall table for {platform.machine()}"
    try:
        if ctypes.CDLL(None, use_errno=True).prctl(21, 0, 0, 0, 0) < 0:  # PR_GET_SECCOMP
            return "the kernel has no seccomp"
    except (OSError, AttributeError):
        return "prctl is unavailable"
    return None


# ("op", code, k, label if true, label if false) or ("label", name)
_Op: TypeAlias = tuple[Literal["op"], int, int, str | None, str | None]
_Label: TypeAlias = tuple[Literal["label"], str]


class _Asm:
    """Forward jumps by label, resolved when the program is packed."""

    def __init__(self) -> None:
        self.ops: list[_Op | _Label] = []

    def ld(self, off: int) -> None:
        self.ops.append(("op", LD_W_ABS, off, None, None))

    def jeq(self, k: int, yes: str | None = None, no: str | None = None) -> None:
        self.ops.append(("op", JEQ_K, k, yes, no))

    def jge(self, k: int, yes: str | None = None, no: str | None = None) -> None:
        self.ops.append(("op", JGE_K, k, yes, no))

    def ret(self, k: int) -> None:
        self.ops.append(("op", RET_K, k, None, None))

    def label(self, name: str) -> None:
        self.ops.append(("label", name))

    def pack(self) -> bytes:
        where, i = {}, 0
        for op in self.ops:
            if op[0] == "label":
                where[op[1]] = i
            else:
                i += 1
        out, i = [], 0
        for op in self.ops:
            if op[0] == "label":
                continue
            _, code, k, yes, no = op
            jt = where[yes] - i - 1 if yes else 0
            jf = where[no] - i - 1 if no else 0
            out.append(struct.pack("HBBI", code, jt, jf, k))
            i += 1
        return b"".join(out)


def build_program(
    network: bool, unix_sockets: bool = True, metadata: bool = True, arch: str | None = None
) -> bytes:
    arch = arch or platform.machine()
    nrs = SYSCALLS[arch]
    p = _Asm()
    p.ld(ARCH)
    p.jeq(AUDIT_ARCH[arch], no="kill")  # a foreign ABI could dodge the table below
    p.ld(NR)
    if arch == "x86_64":
        p.jge(X32_BIT, yes="eperm")
    for name in (*_DENIED, *(_METADATA if metadata else ())):
        if name in nrs:
            p.jeq(nrs[name], yes="eperm")
    p.jeq(nrs["socket"], yes="socket")
    p.jeq(nrs["ioctl"], yes="ioctl")
    p.ret(RET_ALLOW)

    p.label("socket")
    p.ld(_arg(0))  # the address family
    p.jeq(AF_UNIX, yes="allow" if unix_sockets else "eperm")
    if network:
        p.jeq(AF_INET, yes="allow")
        p.jeq(AF_INET6, yes="allow")
        p.jeq(AF_NETLINK, no="eperm")
        p.ld(_arg(2))  # the netlink protocol
        p.jeq(NETLINK_ROUTE, yes="allow")
    p.ret(RET_EPERM)

    p.label("ioctl")
    p.ld(_arg(1))  # the request
    p.jeq(TIOCSTI, yes="eperm")
    p.jeq(TIOCLINUX, yes="eperm")
    p.label("allow")
    p.ret(RET_ALLOW)
    p.label("eperm")
    p.ret(RET_EPERM)
    p.label("kill")
    p.ret(RET_KILL_PROCESS)
    return p.pack()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(network: bool, unix_sockets: bool = True, metadata: bool = True) -> None:
    """Install the filter on the calling thread (no_new_privs is set first, as required)."""
    code = build_program(network, unix_sockets, metadata)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
