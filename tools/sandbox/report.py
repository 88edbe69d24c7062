"""Probe which layers work on this machine and say why the others do not."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TypedDict

from m3agent.tools.sandbox import bwrap, landlock, seccomp
from m3agent.tools.sandbox.cgroup import Cgroup
from m3agent.tools.sandbox.policy import SandboxLayer, SandboxMode, SandboxPolicy

# layers that confine what a command can reach
PROTECTIVE = (SandboxLayer.BWRAP, SandboxLayer.LANDLOCK, SandboxLayer.SECCOMP)


@dataclass(frozen=True, slots=True)
class LayerStatus:
    name: SandboxLayer
    available: bool  # the machine supports it
    active: bool  # it will be applied under this policy
    detail: str  # what it does, or why it is not active


class LayerDict(TypedDict):
    name: str
    available: bool
    active: bool
    detail: str


class ReportDict(TypedDict):
    """SandboxReport.to_dict: what `m3agent doctor --json` shows of it."""

    mode: str
    network: bool
    protected: bool
    gaps: list[str]
    layers: list[LayerDict]


@dataclass(frozen=True, slots=True)
class SandboxReport:
    mode: str
    network: bool
    layers: tuple[LayerStatus, ...]

    def layer(self, name: SandboxLayer) -> LayerStatus:
        return next(layer for layer in self.layers if layer.name == name)

    def is_active(self, name: SandboxLayer) -> bool:
        return self.layer(name).active

    @property
    def protective(self) -> bool:
        return any(self.is_active(n) for n in PROTECTIVE)

    def to_dict(self) -> ReportDict:
        return {
            "mode": self.mode,
            "network": self.network,
            "protected": self.protective,
            "gaps": gaps(self),
            "layers": [
                {"name": s.name, "available": s.available, "active": s.active, "detail": s.detail}
                for s in self.layers
            ],
        }


def probe(policy: SandboxPolicy) -> SandboxReport:
    full = policy.mode is SandboxMode.FULL_ACCESS
    out: list[LayerStatus] = []

    def add(
        name: SandboxLayer, available: bool, detail: str, applies: bool = True, why_not: str = ""
    ) -> None:
        if name in policy.disabled_layers:
            out.append(LayerStatus(name, available, False, f"disabled by the policy ({detail})"))
        elif available and not applies:
            out.append(LayerStatus(name, True, False, why_not))
        else:
            out.append(LayerStatus(name, available, available, detail))

    bwrap_on = SandboxLayer.BWRAP not in policy.disabled_layers
    ok, detail = bwrap.probe() if bwrap_on else (False, "not probed")
    add(SandboxLayer.BWRAP, ok, detail, not full, "not used in full-access mode")

    abi = landlock.abi_version()
    if abi:
        net = "TCP rules" if abi >= 4 else "no TCP rules before ABI 4"
        scope = ", signal/abstract-socket scoping" if abi >= 6 else ""
        ll = f"ABI {abi}: file-system rules, {net}{scope}"
    else:
        ll = "the kernel has no Landlock (needs Linux >= 5.13 with lsm=landlock)"
    add(SandboxLayer.LANDLOCK, bool(abi), ll, not full, "not used in full-access mode")

    why = seccomp.supported()
    unix = (ok and bwrap_on and policy.allow_unix_sockets) or full
    if unix:
        families = "AF_UNIX (allow_unix_sockets)" if not full else "AF_UNIX"
    elif policy.allow_unix_sockets:
        families = "not AF_UNIX (allow_unix_sockets needs bwrap to hide the host's sockets)"
    else:
        families = "not AF_UNIX (socketpair only; allow_unix_sockets opts in)"
    if policy.network:
        families += ", AF_INET/6, NETLINK_ROUTE"
    elif policy.allowed_domains and ok and bwrap_on:
        families += ", AF_INET/6 in a loopback-only network namespace (allow-list proxy)"
    elif policy.allowed_domains:
        families += "; allowed_domains ignored: the allow-list needs bwrap, network stays off"
    sc = (
        f"denies ptrace, io_uring, bpf, chown, xattr writes, TIOCSTI/TIOCLINUX; socket "
        f"families: {families}, no other"
    )
    add(SandboxLayer.SECCOMP, why is None, sc if why is None else why)

    rl = (
        "CPU time, address space, file size, process count; a session write budget of "
        f"{policy.limits.write_budget_mb} MiB of disk growth"
    )
    if os.geteuid() == 0:
        rl += " (RLIMIT_NPROC is not enforced for root: the cgroup layer limits processes)"
    add(SandboxLayer.RLIMITS, True, rl)

    try:
        cg = Cgroup.create(policy.limits.nproc)
        cg.remove()
        add(SandboxLayer.CGROUP, True, f"pids.max and whole-group kill under {cg.path.parent}")
    except OSError as e:
        add(
            SandboxLayer.CGROUP,
            False,
            f"no writable cgroup with the pids controller ({e.strerror or e})",
        )

    tk = (
        "every descendant is killed when the command ends, setsid children included "
        "(bubblewrap's pid namespace, else a subreaper launcher)"
    )
    if os.geteuid() == 0 and not any(s.name == SandboxLayer.CGROUP and s.active for s in out):
        tk += f"; as root without a pids cgroup it also kills the tree past {policy.limits.nproc} processes"
    add(SandboxLayer.TREE_KILL, os.name == "posix", tk)
    add(
        SandboxLayer.ENV_SCRUB,
        True,
        "the environment passes by an allow-list (PATH, HOME, LANG, LC_*, toolchain variables, plus the policy's env_allow)",
    )
    add(
        SandboxLayer.PRIVILEGES,
        os.name == "posix",
        "no_new_privs and every capability dropped before exec"
        " (root keeps uid 0, none of its powers); no controlling tty",
        not full,
        "not used in full-access mode (root keeps its capabilities, e.g. for a package manager)",
    )
    return SandboxReport(policy.mode.value, policy.network, tuple(out))


def gaps(report: SandboxReport) -> list[str]:
    """What stays open on this machine under this policy, one line each (docs/sandbox.md has
    the whole threat model)."""
    on = report.is_active
    out = []
    confined = report.mode != "full-access"
    if confined and not on(SandboxLayer.BWRAP):
        out += [
            "no bubblewrap: chmod and utime of files outside the writable roots are not refused "
            "(Landlock does not govern metadata, seccomp cannot see paths); as root that covers "
            "every root-owned file",
            "no bubblewrap: unix sockets are refused altogether (seccomp, allow_unix_sockets "
            "or not), so a command's own unix-socket servers and clients fail too; ptys cannot "
            "be opened",
            "no bubblewrap: commands cannot create or remove entries directly in the workspace "
            "root (the file tools can)",
        ]
        if not on(SandboxLayer.LANDLOCK):
            out.append(
                "no bubblewrap and no Landlock: secrets, the home directory and the "
                "data dir are readable, and nothing outside the workspace is write-protected"
            )
    if confined:
        out.append(
            "a command can create a nested repository below the workspace root (e.g. "
            "src/.git); the agent's own git never runs it"
        )
    if (
        on(SandboxLayer.LANDLOCK)
        and "signal" not in report.layer(SandboxLayer.LANDLOCK).detail
        and not on(SandboxLayer.BWRAP)
    ):
        out.append(
            "Landlock ABI < 6: signals to and abstract sockets of outside processes are not scoped"
        )
    if (
        on(SandboxLayer.SECCOMP)
        and "AF_UNIX (allow_unix_sockets)" in report.layer(SandboxLayer.SECCOMP).detail
    ):
        out.append(
            "allow_unix_sockets: a command can connect to any pathname unix socket bubblewrap "
            "leaves visible (outside home, /tmp and /run: e.g. a database or container daemon)"
        )
    if "allowed_domains ignored" in report.layer(SandboxLayer.SECCOMP).detail:
        out.append(
            'network = "allowlist" needs bubblewrap (a network namespace of its own): '
            "without it the network stays off"
        )
    if not on(SandboxLayer.SECCOMP):
        out.append(
            "no seccomp: UDP/DNS with the network off, AF_VSOCK and other socket "
            "families, ptrace, TIOCSTI are not refused"
        )
    if not on(SandboxLayer.CGROUP) and os.geteuid() == 0:
        out.append("root without a pids cgroup: the process limit is a best-effort watchdog")
    if not on(SandboxLayer.TREE_KILL):
        out.append("no tree kill: background processes outlive the command and the agent")
    return out


def format_report(report: SandboxReport) -> str:
    net = "on" if report.network else "off"
    if not report.network and "allow-list proxy" in report.layer(SandboxLayer.SECCOMP).detail:
        net = "allowlist"
    rows = [f"sandbox mode: {report.mode}   network: {net}"]
    for s in report.layers:
        mark = "active  " if s.active else ("off     " if s.available else "missing ")
        rows.append(f"  {mark}{s.name:<10} {s.detail}")
    for gap in gaps(report):
        rows.append(f"  gap     {gap}")
    if not report.protective:
        rows.append(
            "  WARNING: no confining layer is active; the shell tool will refuse to run "
            "commands unless --dangerously-no-sandbox is given"
        )
    return "\n".join(rows)
