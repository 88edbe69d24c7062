"""The launcher's spec, built: every confinement decided on the host, applied by confine.py.

(spec.py gives the spec's shape for the type checker; this module computes its values.)

The launcher runs once per command inside the sandbox; whatever it computes costs CPU on
every command, and whatever it imports more so. So the host turns the policy into plain
values here (rlimit numbers, the Landlock rule list, the seccomp program's bytes, the
capset syscall number), marshal-ed into the launcher's argv.
"""

from __future__ import annotations

import marshal
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from m3agent.tools.sandbox import landlock, landlock_rules, privileges, proxy, rlimits, seccomp
from m3agent.tools.sandbox.policy import SandboxLayer, SandboxMode, SandboxPolicy
from m3agent.tools.sandbox.spec import Confinement, LaunchSpec


def allowlist_active(policy: SandboxPolicy, layers: Sequence[SandboxLayer]) -> bool:
    """network = "allowlist" works only in bubblewrap's own network namespace; elsewhere
    the network simply stays off (doctor says so)."""
    return bool(policy.allowed_domains) and not policy.network and SandboxLayer.BWRAP in layers


def confinement(
    policy: SandboxPolicy, layers: Sequence[SandboxLayer], box: Path, fsize_mb: int
) -> Confinement:
    """rlimits / landlock / seccomp / privileges entries of the spec (None: layer off)."""
    allowlist = allowlist_active(policy, layers)
    out: Confinement = {"rlimits": None, "landlock": None, "seccomp": None, "privileges": None}
    if SandboxLayer.RLIMITS in layers:
        out["rlimits"] = rlimits.pairs(replace(policy.limits, file_size_mb=fsize_mb))
    if SandboxLayer.LANDLOCK in layers:
        rules = landlock_rules.ruleset(policy, box, mounts_protect=SandboxLayer.BWRAP in layers)
        if allowlist and rules["net"]:  # TCP: only the forwarder's port
            rules["ops"].append(("port", proxy.PROXY_PORT, landlock.NET_CONNECT_TCP))
        out["landlock"] = rules
    if SandboxLayer.SECCOMP in layers:
        # seccomp cannot see a connect()'s path, and bubblewrap's read-only / shows every
        # pathname socket outside the hidden trees (a database or container daemon under
        # /var/run, /srv...): AF_UNIX is refused unless the user opts in, and even then only
        # where bubblewrap hides home, /tmp and /run. (full-access confines no file system,
        # so it keeps them.)
        unix = policy.mode is SandboxMode.FULL_ACCESS or (
            SandboxLayer.BWRAP in layers and policy.allow_unix_sockets
        )
        out["seccomp"] = seccomp.build_program(  # allow-list: AF_INET in a loopback-only netns
            policy.network or allowlist,
            unix_sockets=unix,
            metadata=policy.mode is not SandboxMode.FULL_ACCESS,
        )
    if SandboxLayer.PRIVILEGES in layers:
        out["privileges"] = privileges.numbers()
    return out


def encode(spec: LaunchSpec) -> str:
    """The spec as the launcher reads it (marshal: built into every interpreter)."""
    return marshal.dumps(dict(spec)).hex()


def agent_pid(layers: Sequence[SandboxLayer]) -> int | None:
    # bubblewrap's --die-with-parent covers it; else the launcher watches the agent
    return os.getpid() if SandboxLayer.BWRAP not in layers else None
