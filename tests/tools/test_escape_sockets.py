"""Issue 21 item 7: pathname unix sockets outside the hidden trees.

bubblewrap shows / read-only, hiding home, /tmp and /run; a daemon socket anywhere else (here
under /var/tmp, standing in for a database or container daemon's /var/run-like directory,
bound read-only like the rest of /) stays visible, and seccomp cannot see the path a connect()
names. So AF_UNIX sockets are refused (seccomp, EPERM) unless the user opts in with
`allow_unix_sockets`; `socketpair` keeps working. Each attempt asserts what the listener
received; the controls show the same connect reaching it with the opt-in (bubblewrap alone)
and with no sandbox at all.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
from m3agent.tools.sandbox.policy import SandboxLayer, SandboxMode, SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
from sandbox_support import CONFIGS, action_argv, make_sandbox, result_of, serve_unix


@pytest.fixture
def daemon():
    """A listening socket in a directory bubblewrap binds read-only (not a hidden tree)."""
    d = Path(tempfile.mkdtemp(prefix="m3-varrun-", dir="/var/tmp"))
    path = d / "daemon.sock"
    rec = serve_unix(path)
    yield path, rec
    rec.stop.set()
    shutil.rmtree(d, ignore_errors=True)


def _connect(sb: Sandbox, path: Path) -> dict:
    r = sb.run(action_argv("unix_connect", path), timeout_s=30)
    assert r.started and not r.timed_out, r.stderr
    return {"layers": r.layers, **result_of(r)}


@pytest.mark.parametrize("config", CONFIGS)
def test_daemon_socket_outside_hidden_trees_is_refused(config, world, daemon):
    path, rec = daemon
    got = _connect(make_sandbox(config, world), path)
    assert not got["ok"] and got["errno"] == "EPERM", got
    assert SandboxLayer.SECCOMP in got["layers"]
    time.sleep(0.2)
    assert rec.got == [], f"the daemon received {rec.got}"


def test_control_opt_in_reaches_the_daemon_with_bwrap(world, daemon):
    """allow_unix_sockets: bubblewrap alone hides nothing at /var/tmp, the connect lands."""
    path, rec = daemon
    got = _connect(make_sandbox("bwrap", world, {"allow_unix_sockets": True}), path)
    assert got["ok"], got
    time.sleep(0.2)
    assert rec.got == [b"escaped"]


def test_control_unsandboxed_reaches_the_daemon(world, daemon):
    path, rec = daemon
    sb = Sandbox(
        SandboxPolicy(
            workspace=world.ws,
            home=world.home,
            mode=SandboxMode.FULL_ACCESS,
            dangerously_no_sandbox=True,
            disabled_layers=frozenset(
                {
                    SandboxLayer.BWRAP,
                    SandboxLayer.LANDLOCK,
                    SandboxLayer.SECCOMP,
                    SandboxLayer.PRIVILEGES,
                }
            ),
        )
    )
    assert _connect(sb, path)["ok"]
    time.sleep(0.2)
    assert rec.got == [b"escaped"]


@pytest.mark.parametrize("config", CONFIGS)
def test_socketpair_still_works(config, world):
    code = (
        "import socket; a, b = socket.socketpair(); a.sendall(b'x'); "
        "print('pair-ok' if b.recv(1) == b'x' else 'bad')"
    )
    r = make_sandbox(config, world).run(["python3", "-c", code], timeout_s=30)
    assert r.exit_code == 0 and "pair-ok" in r.stdout, r.stderr
