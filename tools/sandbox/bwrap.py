"""The bubblewrap command line for a policy: read-only `/`, writable roots bound back in."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from m3agent.tools.sandbox import boot
from m3agent.tools.sandbox.policy import SandboxMode, SandboxPolicy, hidden_paths


def probe() -> tuple[bool, str]:
    exe = shutil.which("bwrap")
    if not exe:
        return False, "bwrap is not installed (apt-get install bubblewrap)"
    try:
        proc = subprocess.run(
            [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
             "--unshare-net", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "true"],
            capture_output=True, timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"bwrap failed to start: {e}"
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return False, f"bwrap is blocked here: {why[-1] if why else 'exit ' + str(proc.returncode)}"
    return True, f"{exe}: read-only /, workspace bound read-write, new pid/net namespaces"


def _under(p: Path, root: Path) -> bool:
    return p == root or root in p.parents


def argv(policy: SandboxPolicy, run_dir: Path, cwd: Path) -> list[str]:
    exe = shutil.which("bwrap") or "bwrap"
    tmp = Path("/tmp")
    a = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # The launcher's interpreter and package must stay visible (an editable clone or a venv
    # under /tmp); nothing else of the host's /tmp is.
    for entry in boot.needed_paths():
        if _under(entry, tmp) and entry != tmp and entry.is_dir():
            a += ["--ro-bind", str(entry), str(entry)]
    if _under(policy.workspace, tmp) and policy.mode is SandboxMode.READ_ONLY:
        a += ["--ro-bind", str(policy.workspace), str(policy.workspace)]
    for root in policy.writable_roots():
        a += ["--bind", str(root), str(root)]
    for prot in policy.protected_paths():
        if prot.exists():
            a += ["--ro-bind", str(prot), str(prot)]
    empty = run_dir / "empty"  # an empty regular file to mask secret files with
    empty.touch()
    for secret in hidden_paths(policy):
        if secret.is_dir():
            a += ["--tmpfs", str(secret), "--remount-ro", str(secret)]
        else:
            a += ["--ro-bind", str(empty), str(secret)]
    box = run_dir / "box"  # the command's part of the run dir (TMPDIR); the rest stays host-only
    a += ["--bind", str(box), str(box)]
    a += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not policy.network:
        a.append("--unshare-net")
    a += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--chdir", str(cwd), "--"]
    return a
