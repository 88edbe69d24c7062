"""The escape battery (issue 3): each attempt under workspace-write, with and without
bubblewrap, must be stopped, and the test asserts *which* layer stopped it.

Layers are told apart by what the attempt sees: bubblewrap's read-only mounts answer EROFS,
its masks make secrets empty or absent and its namespaces hide peers; Landlock answers
EACCES (EXDEV for links, EPERM for its signal/socket scoping); seccomp answers EPERM; limits
answer EAGAIN/EFBIG/MemoryError/SIGXCPU. Each test also checks the outside effect (file
unchanged, server received nothing, process alive).
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from m3agent.tools.sandbox.policy import SandboxLayer
from sandbox_support import CONFIGS, SECRET, action_argv, make_sandbox


@dataclass(frozen=True)
class Attempt:
    id: str
    argv: Callable[[Any, dict, Any], list[str]]  # (world, servers, victim) -> argv
    expect: dict[str, tuple[str, str]]  # config -> (layer, errno | "masked" | "private")
    after: Callable[[Any, dict, Any], None] = lambda w, s, v: None


def _unchanged(w, s, v):
    assert (w.outside / "victim.txt").read_text() == "original\n"
    assert not (w.outside / "new.txt").exists()


def _git_intact(w, s, v):
    cfg = (w.ws / ".git" / "config").read_text()
    assert "escaped" not in cfg
    assert (w.ws / ".git" / "HEAD").exists()
    assert not (w.ws / ".git" / "hooks" / "pre-commit").exists()
    assert stat.S_IMODE((w.ws / ".git" / "config").stat().st_mode) == 0o644


def _nothing_received(kind):
    def check(w, s, v):
        time.sleep(0.2)
        assert s[kind][1].got == [], f"the {kind} server received {s[kind][1].got}"

    return check


def _victim_alive(w, s, v):
    assert v.poll() is None, "the outside process was killed"


FS = {"bwrap": ("bwrap", "EROFS"), "no-bwrap": ("landlock", "EACCES")}
# Landlock runs inside bubblewrap too, and some calls reach its hooks before a mount check.
LANDLOCK = {"bwrap": ("landlock", "EACCES"), "no-bwrap": ("landlock", "EACCES")}
SECCOMP = {"bwrap": ("seccomp", "EPERM"), "no-bwrap": ("seccomp", "EPERM")}


def _reach_server(attempt_id: str, action: str, host: str, server: str) -> Attempt:
    """ACTION (tcp, udp, dns) from inside to the outside SERVER's port on HOST: seccomp
    refuses the socket, and the server receives nothing."""
    return Attempt(
        attempt_id,
        lambda w, s, v: action_argv(action, host, s[server][0]),
        SECCOMP,
        _nothing_received(server),
    )


ATTEMPTS = [
    Attempt(
        "write-absolute-path",
        lambda w, s, v: action_argv("write", w.outside / "new.txt"),
        FS,
        _unchanged,
    ),
    Attempt(
        "write-existing-outside",
        lambda w, s, v: action_argv("write", w.outside / "victim.txt"),
        FS,
        _unchanged,
    ),
    Attempt(
        "write-dotdot",
        lambda w, s, v: action_argv(
            "write", os.path.relpath(w.outside / "new.txt", w.ws / "src").join(["src/", ""])
        ),
        FS,
        _unchanged,
    ),
    Attempt(
        "write-through-symlink",
        lambda w, s, v: action_argv("write", w.ws / "src" / "link" / "new.txt"),
        FS,
        _unchanged,
    ),
    Attempt(
        "hard-link-outside-file",
        lambda w, s, v: action_argv("link", w.outside / "victim.txt", w.ws / "src" / "hl"),
        {"bwrap": ("bwrap", "EXDEV"), "no-bwrap": ("landlock", "EXDEV")},
        _unchanged,
    ),
    Attempt(
        "write-via-proc-self-root",
        lambda w, s, v: action_argv("write", f"/proc/self/root{w.outside}/new.txt"),
        FS,
        _unchanged,
    ),
    Attempt(
        "write-dev-shm",
        lambda w, s, v: action_argv("write", f"/dev/shm/m3-escape-{w.ws.parent.name}"),
        {"bwrap": ("bwrap", "private"), "no-bwrap": ("landlock", "EACCES")},
        lambda w, s, v: _assert_absent(f"/dev/shm/m3-escape-{w.ws.parent.name}"),
    ),
    Attempt(
        "write-etc",
        lambda w, s, v: action_argv("write", "/etc/m3agent-escape"),
        FS,
        lambda w, s, v: _assert_absent("/etc/m3agent-escape"),
    ),
    Attempt(
        "change-git-config",
        lambda w, s, v: action_argv("write", w.ws / ".git" / "config"),
        FS,
        _git_intact,
    ),
    Attempt(
        "create-git-hook",
        lambda w, s, v: action_argv("write", w.ws / ".git" / "hooks" / "pre-commit"),
        FS,
        _git_intact,
    ),
    Attempt(
        "delete-git-head",
        lambda w, s, v: action_argv("unlink", w.ws / ".git" / "HEAD"),
        FS,
        _git_intact,
    ),
    Attempt(
        "rename-git-dir",
        lambda w, s, v: action_argv("rename", w.ws / ".git", w.ws / "moved"),
        {"bwrap": ("bwrap", "EBUSY"), "no-bwrap": ("landlock", "EACCES")},
        _git_intact,
    ),
    Attempt(
        "chmod-protected-file",
        lambda w, s, v: action_argv("chmod", w.ws / ".git" / "config"),
        {"bwrap": ("bwrap", "EROFS"), "no-bwrap": ("mode_restore", "restored")},
        _git_intact,
    ),
    Attempt(
        "read-ssh-key",
        lambda w, s, v: action_argv("read", w.home / ".ssh" / "id_rsa"),
        {"bwrap": ("bwrap", "ENOENT"), "no-bwrap": ("landlock", "EACCES")},
    ),
    Attempt(
        "read-aws-credentials",
        lambda w, s, v: action_argv("read", w.home / ".aws" / "credentials"),
        {"bwrap": ("bwrap", "ENOENT"), "no-bwrap": ("landlock", "EACCES")},
    ),
    Attempt(
        "read-netrc",
        lambda w, s, v: action_argv("read", w.home / ".netrc"),
        {"bwrap": ("bwrap", "ENOENT"), "no-bwrap": ("landlock", "EACCES")},
    ),
    Attempt(
        "read-env-outside-workspace",
        lambda w, s, v: action_argv("read", w.ws.parent / ".env"),
        {"bwrap": ("bwrap", "ENOENT"), "no-bwrap": ("landlock", "EACCES")},
    ),
    Attempt(
        "read-ssh-key-via-proc-root",
        lambda w, s, v: action_argv("read", f"/proc/self/root{w.home}/.ssh/id_rsa"),
        {"bwrap": ("bwrap", "ENOENT"), "no-bwrap": ("landlock", "EACCES")},
    ),
    _reach_server("tcp-connect-localhost", "tcp", "127.0.0.1", "tcp"),
    _reach_server("tcp6-connect-localhost", "tcp", "::1", "tcp6"),
    _reach_server("udp-send-localhost", "udp", "127.0.0.1", "udp"),
    _reach_server("dns-query", "dns", "127.0.0.1", "dns"),
    Attempt("tcp-listen", lambda w, s, v: action_argv("listen"), SECCOMP),
    Attempt(
        "abstract-unix-socket",
        lambda w, s, v: action_argv("unix_abstract", s["unix"][0]),
        # AF_UNIX is refused by seccomp unless allow_unix_sockets (test_escape_sockets.py);
        # bubblewrap alone (bwrap-only below) answers from its own network namespace
        {"bwrap": ("seccomp", "EPERM"), "no-bwrap": ("landlock", "EPERM")},
        _nothing_received("unix"),
    ),
    Attempt(
        "ptrace-other-process", lambda w, s, v: action_argv("ptrace", v.pid), SECCOMP, _victim_alive
    ),
    Attempt(
        "signal-other-process",
        lambda w, s, v: action_argv("signal", v.pid),
        {"bwrap": ("bwrap", "ESRCH"), "no-bwrap": ("landlock", "EPERM")},
        _victim_alive,
    ),
]


def _assert_absent(path):
    assert not os.path.exists(path), f"{path} was created outside the sandbox"


# bubblewrap alone (Landlock and seccomp off): the second line of defence holds by itself.
# "contained": the call succeeds but only inside bubblewrap's private namespace or mount,
# and the outside check (file absent, server silent) proves nothing escaped.
BWRAP_ONLY = {
    "write-absolute-path": "EROFS",
    "write-existing-outside": "EROFS",
    "write-dotdot": "EROFS",
    "write-through-symlink": "EROFS",
    "hard-link-outside-file": "EXDEV",
    "write-via-proc-self-root": "EROFS",
    "write-dev-shm": "private",
    "write-etc": "EROFS",
    "change-git-config": "EROFS",
    "create-git-hook": "EROFS",
    "delete-git-head": "EROFS",
    "rename-git-dir": "EBUSY",
    "chmod-protected-file": "EROFS",
    "read-ssh-key": "ENOENT",
    "read-aws-credentials": "ENOENT",
    "read-netrc": "ENOENT",
    "read-env-outside-workspace": "ENOENT",
    "read-ssh-key-via-proc-root": "ENOENT",
    "tcp-connect-localhost": "ECONNREFUSED",
    "tcp6-connect-localhost": "ECONNREFUSED",
    "udp-send-localhost": "contained",
    "dns-query": "ETIMEDOUT",
    "tcp-listen": "contained",
    "abstract-unix-socket": "ECONNREFUSED",
    "ptrace-other-process": "ESRCH",
    "signal-other-process": "ESRCH",
}
ATTEMPTS = [
    replace(a, expect={**a.expect, "bwrap-only": ("bwrap", BWRAP_ONLY[a.id])}) for a in ATTEMPTS
]


@pytest.fixture
def symlink_out(world):
    os.symlink(world.outside, world.ws / "src" / "link")
    return world


@pytest.mark.parametrize("config", (*CONFIGS, "bwrap-only"))
@pytest.mark.parametrize("attempt", ATTEMPTS, ids=lambda a: a.id)
def test_escape_blocked(attempt, config, symlink_out, servers, victim_process):
    world = symlink_out
    if attempt.id.startswith("tcp6") and "tcp6" not in servers:
        pytest.skip("no IPv6 loopback on this machine")
    sb = make_sandbox(config, world)
    r = sb.run(attempt.argv(world, servers, victim_process), timeout_s=30)
    assert not r.timed_out, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no result from the attempt; stderr: {r.stderr}"
    got = json.loads(lines[-1])
    layer, signature = attempt.expect[config]
    assert layer in r.layers or layer == "mode_restore", f"{layer} not active: {r.layers}"
    if signature == "masked":
        assert got["ok"] and SECRET not in (got.get("data") or ""), got
    elif signature in ("private", "contained"):
        assert got["ok"], got  # only inside bubblewrap's private /dev or network namespace
    elif signature == "restored":
        assert got["ok"], got  # Landlock does not cover chmod: the runner put the mode back
        assert r.restored_modes, "the protected file's mode was not restored"
    else:
        assert not got["ok"], f"escape succeeded: {got}"
        assert got["errno"] == signature, f"expected {signature} from {layer}, got {got}"
    attempt.after(world, servers, victim_process)


def test_landlock_tcp_rules_alone(world, servers):
    """With seccomp off too, Landlock's own TCP rules (ABI >= 4) still refuse connect and
    bind; UDP is outside Landlock's reach, which is why seccomp filters inet sockets."""
    from m3agent.tools.sandbox import landlock
    from m3agent.tools.sandbox.policy import SandboxPolicy
    from m3agent.tools.sandbox.runner import Sandbox

    if landlock.abi_version() < 4:
        pytest.skip(f"Landlock ABI {landlock.abi_version()} has no TCP rules (needs 4)")
    sb = Sandbox(
        SandboxPolicy(
            workspace=world.ws,
            disabled_layers=frozenset({SandboxLayer.BWRAP, SandboxLayer.SECCOMP}),
        )
    )
    for argv, want in (
        (action_argv("tcp", "127.0.0.1", servers["tcp"][0]), "EACCES"),
        (action_argv("listen"), "EACCES"),
    ):
        got = json.loads(sb.run(argv, timeout_s=20).stdout.splitlines()[-1])
        assert not got["ok"] and got["errno"] == want, got
    got = json.loads(
        sb.run(
            action_argv("udp", "127.0.0.1", servers["udp"][0]), timeout_s=20
        ).stdout.splitlines()[-1]
    )
    assert got["ok"]  # documented gap of Landlock alone; seccomp closes it (see the battery)
    assert servers["tcp"][1].got == []
