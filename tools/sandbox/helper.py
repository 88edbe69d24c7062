"""The compiled per-command helper (helper.c): built once per source version, then used
under bubblewrap instead of the Python launcher.

The helper is compiled on the host with the system C compiler into the user's cache dir
(0700), named by the hash of its source, so an edited helper.c is rebuilt and a stale binary
is never run. No compiler (or a failed build) leaves the Python launcher in place: slower,
never less confined. The directory is bound read-only into the sandbox (boot.needed_paths)
and lies outside every writable root, so no command can change what the next one runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from m3agent.tools.sandbox.spec import LaunchSpec

SOURCE = Path(__file__).resolve().parent / "helper.c"


def cache_dir() -> Path:
    import platformdirs

    return Path(os.path.realpath(platformdirs.user_cache_dir("m3agent"))) / "sandbox-helper"


def _target() -> Path | None:
    try:
        digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    except OSError:
        return None
    return cache_dir() / f"m3agent-sandbox-{digest}"


def path() -> Path | None:
    """The built helper, or None (not built, or its source changed since)."""
    target = _target()
    return target if target is not None and os.access(target, os.X_OK) else None


def build() -> Path | None:
    """Compile the helper unless already there; None when no compiler can."""
    target = _target()
    if target is None:
        return None
    if os.access(target, os.X_OK):
        return target
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".build-")
    os.close(fd)
    try:
        for static in (["-static"], []):  # static: no dynamic loader work per command
            r = subprocess.run(
                [cc, "-O2", *static, "-o", tmp, str(SOURCE)],
                capture_output=True,
                timeout=120,
            )
            if r.returncode == 0:
                os.chmod(tmp, 0o755)
                os.replace(tmp, target)
                return target
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return None


def argv(helper: Path, spec: LaunchSpec, status_fd: int | None, command: list[str]) -> list[str]:
    """The helper's command line for a launcher spec (launch_spec.confinement's entries)."""
    tokens: list[str] = []
    nproc = _nproc()
    for which, value, extra in spec.get("rlimits") or ():
        flag = "N" if which == nproc else "R"
        tokens += [flag, str(which), str(value), str(value + extra)]
    ll = spec.get("landlock")
    if ll:
        tokens += ["L", str(ll["fs"]), str(ll["net"]), str(ll["scoped"]), str(ll["attr_size"])]
        for op in ll["ops"]:
            if op[0] == "allow":
                tokens += ["A", op[1], str(op[2])]
            elif op[0] == "port":  # allow-list mode, which runs the Python launcher instead
                raise ValueError("the helper takes no port rule")
            else:
                root, rights, excluded, dir_rights = op[1:]
                tokens += ["E" if op[0] == "except" else "C", root, str(rights)]
                tokens += [str(dir_rights), str(len(excluded)), *excluded]
        tokens.append("X")
    program, privileges = spec.get("seccomp"), spec.get("privileges")
    if program:
        tokens += ["S", program.hex()]
    if privileges:
        tokens += ["P", *map(str, privileges)]
    fd = -1 if status_fd is None else status_fd
    return [str(helper), str(fd), str(len(tokens)), *tokens, *command]


def _nproc() -> int:
    import resource

    return resource.RLIMIT_NPROC
