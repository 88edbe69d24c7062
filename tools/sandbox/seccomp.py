"""A seccomp-BPF filter assembled in Python: deny ptrace, io_uring and (network off) inet sockets.

Denials return EPERM, which Landlock never uses (it answers EACCES/EXDEV), so a test can
tell which layer refused a call.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# name -> syscall number per architecture
SYSCALLS = {
    "x86_64": {"ptrace": 101, "socket": 41, "process_vm_readv": 310, "process_vm_writev": 311,
               "io_uring_setup": 425, "kexec_load": 246, "bpf": 321, "perf_event_open": 298},
    "aarch64": {"ptrace": 117, "socket": 198, "process_vm_readv": 270, "process_vm_writev": 271,
                "io_uring_setup": 425, "kexec_load": 104, "bpf": 280, "perf_event_open": 241},
}
AF_INET, AF_INET6, AF_PACKET = 2, 10, 17

LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
RET_ALLOW, RET_KILL_PROCESS = 0x7FFF0000, 0x80000000
RET_EPERM = 0x00050000 | errno.EPERM
X32_BIT = 0x40000000


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


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def build_program(network: bool, arch: str | None = None) -> bytes:
    arch = arch or platform.machine()
    nrs = SYSCALLS[arch]
    denied = [nrs[n] for n in ("ptrace", "process_vm_readv", "process_vm_writev",
                                "io_uring_setup", "kexec_load", "bpf", "perf_event_open")]
    prog = [
        _ins(LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        _ins(JEQ_K, 1, 0, AUDIT_ARCH[arch]),
        _ins(RET_K, 0, 0, RET_KILL_PROCESS),  # a foreign ABI could dodge the table below
        _ins(LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if arch == "x86_64":
        prog += [_ins(JGE_K, 0, 1, X32_BIT), _ins(RET_K, 0, 0, RET_EPERM)]
    for nr in denied:
        prog += [_ins(JEQ_K, 0, 1, nr), _ins(RET_K, 0, 0, RET_EPERM)]
    if not network:
        prog += [
            _ins(JEQ_K, 0, 5, nrs["socket"]),
            _ins(LD_W_ABS, 0, 0, 16),  # args[0] (low 32 bits): the address family
            _ins(JEQ_K, 2, 0, AF_INET),
            _ins(JEQ_K, 1, 0, AF_INET6),
            _ins(JEQ_K, 0, 1, AF_PACKET),
            _ins(RET_K, 0, 0, RET_EPERM),
        ]
    prog.append(_ins(RET_K, 0, 0, RET_ALLOW))
    return b"".join(prog)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(network: bool) -> None:
    """Install the filter on the calling thread (no_new_privs is set first, as required)."""
    code = build_program(network)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
