"""Escape attempts, run *inside* the sandbox: `python escape_actions.py ACTION ARG...`.

Each prints one JSON line: {"ok": bool, "errno": "EACCES" | ..., "detail": ...}. The tests
map the errno to the layer that must have refused it (EPERM: seccomp or Landlock scoping,
EACCES/EXDEV: Landlock, EROFS/ENOENT/EBUSY: bubblewrap's mounts, EAGAIN: process limit...).
"""

import ctypes
import errno
import json
import os
import socket
import sys
import time


def result(ok, err=None, **detail):
    print(
        json.dumps(
            {"ok": ok, "errno": errno.errorcode.get(err, str(err)) if err else None, **detail}
        )
    )
    sys.stdout.flush()


def attempt(fn):
    try:
        out = fn()
        result(True, data=out if isinstance(out, (str, int)) else None)
    except TimeoutError as e:  # socket timeouts carry no errno
        result(False, errno.ETIMEDOUT, detail=str(e))
    except OSError as e:
        result(False, e.errno, detail=str(e))
    except MemoryError:
        result(False, "MemoryError")


def write(path):
    with open(path, "a") as f:
        f.write("escaped\n")
    return "written"


def read(path):
    with open(path) as f:
        return f.read()


def tcp(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect((host, int(port)))
    s.sendall(b"escaped")
    return "connected"


def udp(host, port, payload=b"escaped"):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(payload, (host, int(port)))
    return "sent"


def dns(host, port):
    # A real DNS query for example.com (type A) to the resolver the test runs.
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(q, (host, int(port)))
    return s.recv(512).hex()


def listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return "listening"


def unix_abstract(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect("\0" + name)
    s.sendall(b"escaped")
    return "connected"


def unix_connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(path)
    s.sendall(b"escaped")
    return "connected"


def socket_family(family, kind=1, proto=0):
    s = socket.socket(int(family), int(kind), int(proto))
    s.close()
    return "created"


def plant_git(root, target="dir"):
    """Make `root/.git` something the agent's git would run: a repository with a hook-like
    core.fsmonitor, a gitdir file pointing elsewhere, or a symlink to another repository."""
    git = os.path.join(root, ".git")
    if target == "dir":
        os.makedirs(git, exist_ok=True)
        with open(os.path.join(git, "config"), "w") as f:
            f.write("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    elif target == "file":
        with open(git, "w") as f:
            f.write("gitdir: /var/tmp/elsewhere\n")
    else:
        os.symlink("/var/tmp/elsewhere", git)
    return "planted"


def mkdir_write(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return write(path)


def replace_by_rename(src, dst):
    os.makedirs(src, exist_ok=True)
    os.rename(src, dst)
    return "replaced"


def caps():
    with open("/proc/self/status") as f:
        rows = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    return json.dumps({k: rows[k] for k in ("CapPrm", "CapEff", "CapBnd", "NoNewPrivs")})


def mknod(path):
    import stat as st

    os.mknod(path, 0o666 | st.S_IFCHR, os.makedev(1, 3))
    return "made"


def tty_write(path):
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
    os.write(fd, b"escaped\n")
    return "written"


def _tiocsti(fd, text=b"x"):
    import fcntl

    for ch in text:
        fcntl.ioctl(fd, 0x5412, bytes([ch]))  # TIOCSTI


def tiocsti(path):
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    _tiocsti(fd, b"Z")
    return "injected"


def tiocsti_own():
    master, slave = os.openpty()
    _tiocsti(slave)
    return "injected"


def ctty():
    os.open("/dev/tty", os.O_RDWR)
    return "opened"


def chown(path):
    os.chown(path, os.getuid(), os.getgid())
    return "chowned"


def setxattr(path):
    os.setxattr(path, "user.m3agent", b"escaped")
    return "set"


def utime(path):
    os.utime(path, (0, 0))
    return "touched"


def proc_environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read().decode("utf-8", "replace")


def fork_bomb(n):
    made = 0
    try:
        for _ in range(int(n)):
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            made += 1
    except OSError as e:
        result(False, e.errno, made=made)
        return
    result(True, made=made)


def memory_hog(mb):
    blob = bytearray(int(mb) * 1024 * 1024)
    return len(blob)


def disk_fill(path, mb):
    chunk = b"\0" * (1024 * 1024)
    with open(path, "wb") as f:
        for _ in range(int(mb)):
            f.write(chunk)
            f.flush()
    return "filled"


def disk_fill_slow(prefix, files, mb):
    """Files of `mb` MiB each, a MiB at a time (a command filling a disk takes a while)."""
    chunk = b"\1" * (1024 * 1024)
    for i in range(int(files)):
        with open(f"{prefix}{i}", "wb") as f:
            for _ in range(int(mb)):
                f.write(chunk)
                f.flush()
                time.sleep(0.01)
    return "filled"


def cpu_hog():
    while True:
        pass


def ptrace(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, int(pid), None, None) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")
    return "attached"


def signal_outside(pid):
    os.kill(int(pid), 15)
    return "killed"


def link_outside(src, dst):
    os.link(src, dst)
    with open(dst, "a") as f:
        f.write("escaped\n")
    return "linked"


def rename(src, dst):
    os.rename(src, dst)
    return "renamed"


def chmod(path):
    os.chmod(path, 0o777)
    return "chmodded"


def unlink(path):
    os.unlink(path)
    return "deleted"


def env_secrets(*names):
    return json.dumps({n: os.environ.get(n) for n in names})


ACTIONS = {
    "write": write,
    "read": read,
    "tcp": tcp,
    "udp": udp,
    "dns": dns,
    "listen": listen,
    "unix_abstract": unix_abstract,
    "memory_hog": memory_hog,
    "disk_fill": disk_fill,
    "cpu_hog": cpu_hog,
    "ptrace": ptrace,
    "signal": signal_outside,
    "link": link_outside,
    "rename": rename,
    "chmod": chmod,
    "unlink": unlink,
    "env": env_secrets,
    "unix_connect": unix_connect,
    "plant_git": plant_git,
    "disk_fill_slow": disk_fill_slow,
    "caps": caps,
    "mknod": mknod,
    "tty_write": tty_write,
    "tiocsti": tiocsti,
    "tiocsti_own": tiocsti_own,
    "ctty": ctty,
    "chown": chown,
    "setxattr": setxattr,
    "utime": utime,
    "proc_environ": proc_environ,
    "mkdir_write": mkdir_write,
    "replace": replace_by_rename,
    "socket_family": socket_family,
}

if __name__ == "__main__":
    name, args = sys.argv[1], sys.argv[2:]
    if name == "fork_bomb":
        fork_bomb(*args)
    else:
        attempt(lambda: ACTIONS[name](*args))
