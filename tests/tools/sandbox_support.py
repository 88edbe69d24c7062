"""Fixtures for the tools tests: a git workspace, an outside dir, a fake HOME with secrets,
local servers the sandbox must not reach, and the two sandbox configurations."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from m3agent.tools.sandbox.policy import Limits, SandboxLayer, SandboxMode, SandboxPolicy
from m3agent.tools.sandbox.report import SandboxReport, probe
from m3agent.tools.sandbox.runner import Sandbox

ACTIONS = Path(__file__).parent / "escape_actions.py"
SECRET = "TOP-SECRET-CONTENT"


@dataclass
class World:
    ws: Path
    outside: Path
    home: Path
    servers: dict = field(default_factory=dict)


@pytest.fixture
def world(tmp_path):
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "main.py").write_text("print('hi')\n")
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    os.chmod(ws / ".git" / "config", 0o644)
    # Outside the workspace, but (unlike /tmp) still visible under bubblewrap's read-only /.
    base = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else tmp_path
    outside = Path(tempfile.mkdtemp(prefix="m3-outside-", dir=base))
    (outside / "victim.txt").write_text("original\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SECRET)
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text(SECRET)
    (home / ".netrc").write_text(SECRET)
    (tmp_path / ".env").write_text(SECRET)  # in the workspace's parent
    yield World(ws, outside, home)
    shutil.rmtree(outside, ignore_errors=True)


class _Recorder:
    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.stop = threading.Event()


def _record(srv: socket.socket) -> _Recorder:
    """Accept on a listening socket in a thread, keeping what each client sent first."""
    srv.settimeout(0.1)
    rec = _Recorder()

    def loop():
        while not rec.stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.settimeout(1)
            try:
                rec.got.append(conn.recv(100) or b"<connect>")
            except OSError:
                rec.got.append(b"<connect>")
            conn.close()
        srv.close()

    threading.Thread(target=loop, daemon=True).start()
    return rec


def _serve_tcp(family: int, host: str):
    srv = socket.socket(family, socket.SOCK_STREAM)
    srv.bind((host, 0))
    srv.listen()
    port = srv.getsockname()[1]
    return port, _record(srv)


def _serve_udp():
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind(("127.0.0.1", 0))
    srv.settimeout(0.1)
    rec = _Recorder()

    def loop():
        while not rec.stop.is_set():
            try:
                data, addr = srv.recvfrom(512)
            except OSError:
                continue
            rec.got.append(data)
            # Answer like a resolver would (header echo with QR set), so a query "works".
            srv.sendto(data[:2] + b"\x81\x80" + data[4:], addr)
        srv.close()

    threading.Thread(target=loop, daemon=True).start()
    return srv.getsockname()[1], rec


def _serve_abstract():
    name = f"m3agent-test-{uuid.uuid4().hex[:8]}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen()
    return name, _record(srv)


@pytest.fixture
def servers():
    out = {
        "tcp": _serve_tcp(socket.AF_INET, "127.0.0.1"),
        "udp": _serve_udp(),
        "dns": _serve_udp(),
        "unix": _serve_abstract(),
    }
    if socket.has_ipv6:
        try:
            out["tcp6"] = _serve_tcp(socket.AF_INET6, "::1")
        except OSError:
            pass
    yield out
    for _, rec in out.values():
        rec.stop.set()


@pytest.fixture
def victim_process():
    """A process outside the sandbox that commands must not trace or signal."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


CONFIGS = ("bwrap", "no-bwrap")


def unprobed(policy: SandboxPolicy) -> Sandbox:
    """A Sandbox for `policy` with no layer probed and no helper built: enough for what reads
    only the policy (the path guard, the approvals' precheck), never for running commands."""
    return Sandbox(policy, SandboxReport(policy.mode.value, False, ()), use_helper=False)


# The layers a control turns off: without them a command is not confined at all.
NO_CONFINEMENT = frozenset(
    {
        SandboxLayer.BWRAP,
        SandboxLayer.LANDLOCK,
        SandboxLayer.SECCOMP,
        SandboxLayer.CGROUP,
        SandboxLayer.ENV_SCRUB,
        SandboxLayer.PRIVILEGES,
    }
)


def unconfined(world: World, off: frozenset[str] = NO_CONFINEMENT, **policy_kw) -> Sandbox:
    """A control's sandbox over world: full access, the layers OFF turned off (the policy has
    to say dangerously_no_sandbox for that); POLICY_KW adds SandboxPolicy fields."""
    return Sandbox(
        SandboxPolicy(
            workspace=world.ws,
            home=world.home,
            mode=SandboxMode.FULL_ACCESS,
            dangerously_no_sandbox=True,
            disabled_layers=off,
            **policy_kw,
        )
    )


def make_sandbox(config: str, world: World, policy_kw: dict | None = None, **limits) -> Sandbox:
    disabled = {
        "bwrap": frozenset(),
        "no-bwrap": frozenset({SandboxLayer.BWRAP}),
        "bwrap-only": frozenset({SandboxLayer.LANDLOCK, SandboxLayer.SECCOMP}),
    }[config]
    policy = SandboxPolicy(
        workspace=world.ws,
        home=world.home,
        disabled_layers=disabled,
        limits=Limits(
            cpu_s=limits.get("cpu_s", 20),
            address_space_mb=limits.get("as_mb", 1024),
            file_size_mb=limits.get("fsize_mb", 16),
            nproc=limits.get("nproc", 64),
            write_budget_mb=limits.get("budget_mb", 8192),
        ),
        **(policy_kw or {}),
    )
    report = probe(policy)
    if config in ("bwrap", "bwrap-only") and not report.is_active(SandboxLayer.BWRAP):
        pytest.skip(f"bubblewrap unavailable on this machine: {report.layer('bwrap').detail}")
    if config == "no-bwrap" and not report.is_active(SandboxLayer.LANDLOCK):
        pytest.skip(f"Landlock unavailable on this machine: {report.layer('landlock').detail}")
    return Sandbox(policy, report)


def result_of(r) -> dict:
    """The JSON line an escape action printed."""
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no result from the attempt; exit {r.exit_code}; stderr: {r.stderr[-2000:]}"
    return json.loads(lines[-1])


def serve_unix(path: Path):
    """A stream server on a pathname socket, as ssh-agent or D-Bus would run one."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen()
    return _record(srv)


def action_argv(name: str, *args) -> list[str]:
    # The script's text rides on the command line: a checkout under /tmp or $HOME is hidden
    # inside bubblewrap, and the attempt must not depend on where the tests live.
    return [sys.executable, "-S", "-c", ACTIONS.read_text(), name, *map(str, args)]
