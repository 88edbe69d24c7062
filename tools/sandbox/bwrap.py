"""The bubblewrap command line for a policy: read-only `/`, writable roots bound back in."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from pathlib import Path

from m3agent.tools.sandbox import boot
from m3agent.tools.sandbox.policy import PROTECTED_DIRS, SandboxMode, SandboxPolicy, hidden_paths


def probe() -> tuple[bool, str]:
    exe = shutil.which("bwrap")
    if not exe:
        return False, "bwrap is not installed (apt-get install bubblewrap)"
    try:
        proc = subprocess.run(
            [
                exe,
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--unshare-pid",
                "--unshare-net",
                "--die-with-parent",
                "--new-session",
                "--cap-drop",
                "ALL",
                "true",
            ],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"bwrap failed to start: {e}"
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return False, f"bwrap is blocked here: {why[-1] if why else 'exit ' + str(proc.returncode)}"
    return True, (
        f"{exe}: read-only /; /tmp, /run and home private (toolchain allow-list "
        "read-only); workspace read-write, .git and project files read-only; new "
        "pid/net namespaces"
    )


def _under(p: Path, root: Path) -> bool:
    return p == root or root in p.parents


# Inside hidden trees, what stays visible (read-only) when present: DNS configuration, and the
# system profile on NixOS. No sockets of agents or services.
RUN_KEEP = (Path("/run/systemd/resolve"), Path("/run/current-system"), Path("/run/opengl-driver"))


@functools.cache
def _has_size() -> bool:
    """bubblewrap >= 0.5 takes --size for a tmpfs."""
    try:
        out = subprocess.run(
            [shutil.which("bwrap") or "bwrap", "--help"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--size" in out.stdout + out.stderr


def hidden_trees(policy: SandboxPolicy) -> tuple[Path, ...]:
    """Trees replaced by an empty tmpfs: /tmp, /run (agent and service sockets: D-Bus, the
    user's keyring, gpg-agent, ssh-agent, docker), a real /var/run, and the home directory."""
    trees = [Path("/tmp"), Path("/run")]
    if os.path.isdir("/var/run") and not os.path.islink("/var/run"):
        trees.append(Path("/var/run"))
    home = policy.home_dir()
    if home != Path("/") and home.is_dir():
        trees.append(home)
    return tuple(t for t in trees if t.is_dir())


def placeholders(policy: SandboxPolicy) -> list[Path]:
    """Protected directories (.git, .m3agent) that are absent now: bubblewrap mounts an empty
    read-only dir there, creating its mount point on the host, which `remove_placeholders`
    takes away after the run (an empty dir is invisible to git)."""
    return [
        p for p in policy.protected_paths() if p.name in PROTECTED_DIRS and not os.path.lexists(p)
    ]


def remove_placeholders(paths: list[Path]) -> None:
    for p in paths:
        try:  # only what is still an empty directory: anything else is not ours
            if os.path.isdir(p) and not os.path.islink(p):
                os.rmdir(p)
        except OSError:
            pass


def absent_files(policy: SandboxPolicy) -> list[Path]:
    """Protected files (AGENTS.md, .m3agentignore...) that are absent now. A mount point
    would show up as an empty file inside and out, so instead whatever a command creates
    under these names is set aside after the run (`set_aside`)."""
    return [
        p
        for p in policy.protected_paths()
        if p.name not in PROTECTED_DIRS and not os.path.lexists(p)
    ]


def set_aside(paths: list[Path]) -> list[str]:
    """Rename what a command created under a protected file name (never delete: it may hold
    something the command moved there); the new names."""
    moved = []
    for p in paths:
        if not os.path.lexists(p):
            continue
        dest = p.with_name(f"{p.name}.m3agent-blocked-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            os.rename(p, dest)  # renames a symlink itself, never its target
            moved.append(str(dest))
        except OSError:
            pass
    return moved


def argv(
    policy: SandboxPolicy, run_dir: Path, cwd: Path, binds: tuple[tuple[str, str], ...] = ()
) -> list[str]:
    """`binds`: (host path, sandbox path) pairs bound read-write (the allow-list proxy's
    socket)."""
    exe = shutil.which("bwrap") or "bwrap"
    trees = hidden_trees(policy)
    a = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    size = ["--size", str(policy.limits.write_budget_mb * 1024 * 1024)] if _has_size() else []
    for tree in trees:  # in memory, so bounded like the disk (the budget, per tmpfs)
        a += [*size, "--tmpfs", str(tree)]
    # Brought back read-only from the hidden trees: the launcher's interpreter and package
    # (an editable clone or a venv under /tmp or $HOME), the toolchain allow-list, DNS.
    shown = [*boot.needed_paths(), *policy.home_allowed(), *RUN_KEEP]
    if policy.mode is SandboxMode.READ_ONLY:
        shown.append(policy.workspace)
    shown = [p for p in dict.fromkeys(shown) if any(_under(p, t) for t in trees) and p.exists()]
    shown.sort(key=lambda p: len(p.parts))  # a parent's bind must not cover its child's
    for p in shown:
        a += ["--ro-bind", str(p), str(p)]
    roots = policy.writable_roots()
    for root in roots:
        a += ["--bind", str(root), str(root)]
    empty = run_dir / "empty"  # an empty regular file to mask secret files with
    empty.touch()
    for prot in (*policy.protected_paths(), *boot.inside_roots(policy)):
        if os.path.lexists(prot):
            a += ["--ro-bind", str(prot), str(prot)]  # a symlink is bound as what it names
        elif prot.name in PROTECTED_DIRS:  # protected before it exists: an empty, read-only dir
            a += ["--tmpfs", str(prot), "--remount-ro", str(prot)]
    visible = (*shown, *roots)
    for secret in hidden_paths(policy):
        if any(_under(secret, t) for t in trees) and not any(_under(secret, v) for v in visible):
            continue  # already gone with its tree
        if secret.is_dir():
            a += ["--tmpfs", str(secret), "--remount-ro", str(secret)]
        else:
            a += ["--ro-bind", str(empty), str(secret)]
    box = run_dir / "box"  # the command's part of the run dir (TMPDIR); the rest stays host-only
    a += ["--bind", str(box), str(box)]
    for src, dest in binds:
        a += ["--bind", src, dest]
    a += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not policy.network:
        a.append("--unshare-net")
    a += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--chdir", str(cwd), "--"]
    return a
