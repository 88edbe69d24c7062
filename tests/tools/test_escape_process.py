"""Issue 13, class 6: the process-level escapes, which matter most without bubblewrap.

Capabilities and no_new_privs (mknod as root), the agent's death (kill -9 must take the
command with it), the user's terminal (writes, TIOCSTI, a controlling tty), the agent's own
/proc entries (its API keys), and metadata changes outside the writable roots. Each attempt
runs with and without bubblewrap and names the layer that stopped it; each control turns the
relevant layers off and sees the attempt succeed.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from m3agent.tools.sandbox.policy import SandboxLayer, SandboxMode, SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
from sandbox_support import (
    CONFIGS,
    NO_CONFINEMENT,
    SECRET,
    action_argv,
    make_sandbox,
    result_of,
    unconfined,
)

OFF = NO_CONFINEMENT


def _open(world, off=OFF, **kw) -> Sandbox:
    return unconfined(world, off, **kw)


def _got(sb, argv):
    r = sb.run(argv, timeout_s=30)
    assert r.started, r.stderr
    return r, result_of(r)


# -- capabilities ----------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_capabilities_dropped_and_no_new_privs(config, world):
    r, got = _got(make_sandbox(config, world), action_argv("caps"))
    status = json.loads(got["data"])
    assert SandboxLayer.PRIVILEGES in r.layers
    assert int(status["CapPrm"], 16) == 0 and int(status["CapEff"], 16) == 0, status
    assert status["NoNewPrivs"] == "1"
    if config == "no-bwrap" and os.geteuid() == 0:
        assert int(status["CapBnd"], 16) == 0, status  # root's bounding set emptied too


@pytest.mark.parametrize("config", CONFIGS)
def test_mknod_refused(config, world):
    r, got = _got(make_sandbox(config, world), action_argv("mknod", world.ws / "src" / "null2"))
    assert not got["ok"] and got["errno"] == "EPERM", got
    assert not (world.ws / "src" / "null2").exists()


def test_control_mknod_as_root_with_privileges_kept(world):
    if os.geteuid() != 0:
        pytest.skip("mknod needs root (CAP_MKNOD) to show anything")
    _, got = _got(_open(world), action_argv("mknod", world.ws / "src" / "null2"))
    assert got["ok"], got


# -- the agent dies ----------------------------------------------------------------------------

AGENT = """
import sys
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
sb = Sandbox(SandboxPolicy.from_json(sys.argv[1]))
sb.run(sys.argv[2], timeout_s=120)
"""


def _beats(marker: Path, seconds: float) -> bool:
    if marker.exists():
        marker.unlink()
    time.sleep(seconds)
    return marker.exists()


def _kill_agent_and_watch(policy: SandboxPolicy, world) -> tuple[bool, Path]:
    marker, pidfile = world.ws / "src" / "beat", world.ws / "src" / "beat.pid"
    cmd = (
        f"setsid sh -c 'echo $$ > {pidfile}; while true; do touch {marker}; sleep 0.1; done' "
        "</dev/null >/dev/null 2>&1 & sleep 100"
    )
    agent = subprocess.Popen([sys.executable, "-c", AGENT, policy.to_json(), cmd])
    deadline = time.monotonic() + 20
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the command never started"
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait()
    time.sleep(1.0)
    return _beats(marker, 1.0), pidfile


@pytest.mark.parametrize("config", CONFIGS)
def test_command_dies_with_the_agent(config, world):
    sb = make_sandbox(config, world)
    alive, _ = _kill_agent_and_watch(sb.policy, world)
    assert not alive, "the command survived kill -9 of the agent"


def test_control_command_survives_agent_without_tree_kill(world):
    policy = SandboxPolicy(
        workspace=world.ws,
        dangerously_no_sandbox=True,
        disabled_layers=OFF | {SandboxLayer.TREE_KILL},
    )
    alive, pidfile = _kill_agent_and_watch(policy, world)
    try:
        assert alive, "without tree_kill (and bubblewrap) the command should outlive the agent"
    finally:
        os.killpg(int(pidfile.read_text()), signal.SIGKILL)


# -- the user's terminal ----------------------------------------------------------------------


@pytest.fixture
def user_tty():
    master, slave = pty.openpty()
    os.set_blocking(master, False)
    os.set_blocking(slave, False)
    yield os.ttyname(slave), master, slave
    os.close(master)
    os.close(slave)


def _drain(fd) -> bytes:
    """What is waiting on fd (for injected input: the master, which sees the tty's echo)."""
    time.sleep(0.2)
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""


TTY = {"bwrap": ("bwrap", "ENOENT"), "no-bwrap": ("landlock", "EACCES")}


@pytest.mark.parametrize(("action", "written"), [("tty_write", b"escaped"), ("tiocsti", b"Z")])
@pytest.mark.parametrize("config", CONFIGS)
def test_nothing_reaches_the_users_terminal(config, action, written, world, user_tty):
    """Neither a write to it nor TIOCSTI (typing into its input queue)."""
    path, master, _ = user_tty
    r, got = _got(make_sandbox(config, world), action_argv(action, path))
    layer, err = TTY[config]
    assert layer in r.layers and not got["ok"] and got["errno"] == err, got
    assert written not in _drain(master)


def test_control_write_to_the_users_terminal(world, user_tty):
    path, master, _ = user_tty
    _, got = _got(_open(world), action_argv("tty_write", path))
    assert got["ok"] and b"escaped" in _drain(master)


def test_tiocsti_refused_by_seccomp_alone(world, user_tty):
    """Landlock off too: the terminal opens, and seccomp refuses the ioctl itself."""
    path, master, _ = user_tty
    sb = make_sandbox("no-bwrap", world)
    sb = Sandbox(
        sb.policy.with_(disabled_layers=frozenset({SandboxLayer.BWRAP, SandboxLayer.LANDLOCK}))
    )
    r, got = _got(sb, action_argv("tiocsti", path))
    assert SandboxLayer.SECCOMP in r.layers and not got["ok"] and got["errno"] == "EPERM", got
    assert b"Z" not in _drain(master)


@pytest.mark.parametrize("config", CONFIGS)
def test_tiocsti_refused_on_own_pty(config, world):
    r, got = _got(make_sandbox(config, world), action_argv("tiocsti_own"))
    if config == "no-bwrap":  # /dev/ptmx is not even openable without bubblewrap
        assert not got["ok"] and got["errno"] == "EACCES", got
    else:
        assert SandboxLayer.SECCOMP in r.layers and not got["ok"] and got["errno"] == "EPERM", got


def test_control_tiocsti_into_the_users_terminal(world, user_tty):
    path, master, _ = user_tty
    legacy = Path("/proc/sys/dev/tty/legacy_tiocsti")
    if legacy.exists() and legacy.read_text().strip() == "0":
        pytest.skip("the kernel refuses TIOCSTI for everyone here (dev.tty.legacy_tiocsti=0)")
    if os.geteuid() != 0:
        pytest.skip("TIOCSTI on a terminal that is not the controlling one needs CAP_SYS_ADMIN")
    _, got = _got(_open(world), action_argv("tiocsti", path))
    assert got["ok"] and b"Z" in _drain(master), got


@pytest.mark.parametrize("config", CONFIGS)
def test_no_controlling_terminal(config, world):
    _, got = _got(make_sandbox(config, world), action_argv("ctty"))
    assert not got["ok"] and got["errno"] == "ENXIO", got


# -- the agent's own /proc entries ---------------------------------------------------------------

PROC_AGENT = """
import ctypes, json, os, sys
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
sb = Sandbox(SandboxPolicy.from_json(sys.argv[1]))
if sys.argv[3] == "dumpable":
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # undo the hardening (the control)
argv = [a.replace("AGENT_PID", str(os.getpid())) for a in json.loads(sys.argv[2])]
r = sb.run(argv, timeout_s=30)
print(json.dumps({"stdout": r.stdout, "stderr": r.stderr, "layers": list(r.layers)}))
"""


def _agent_reads_own_environ(policy: SandboxPolicy, dumpable: str = "hardened") -> dict:
    env = {**os.environ, "M3AGENT_TEST_API_KEY": SECRET}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            PROC_AGENT,
            policy.to_json(),
            json.dumps(action_argv("proc_environ", "AGENT_PID")),
            dumpable,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("config", CONFIGS)
def test_agent_environ_unreadable(config, world):
    r = _agent_reads_own_environ(make_sandbox(config, world).policy)
    got = json.loads([ln for ln in r["stdout"].splitlines() if ln.startswith("{")][-1])
    assert SECRET not in r["stdout"] + r["stderr"]
    # bubblewrap: the agent is outside the pid namespace; Landlock: a process outside the
    # domain cannot be ptrace-accessed (which /proc/PID/environ needs); undumpable on top.
    want = {"bwrap": "ENOENT", "no-bwrap": "EACCES"}[config]
    assert not got["ok"] and got["errno"] == want, got


def test_agent_environ_unreadable_by_undumpable_alone(world):
    """Landlock and bubblewrap off: PR_SET_DUMPABLE 0 plus dropped capabilities still hold."""
    policy = SandboxPolicy(
        workspace=world.ws, disabled_layers=frozenset({SandboxLayer.BWRAP, SandboxLayer.LANDLOCK})
    )
    r = _agent_reads_own_environ(policy)
    got = json.loads([ln for ln in r["stdout"].splitlines() if ln.startswith("{")][-1])
    assert not got["ok"] and got["errno"] == "EACCES" and SECRET not in r["stdout"], got


def test_control_agent_environ_readable_when_dumpable_and_unconfined(world):
    policy = SandboxPolicy(workspace=world.ws, dangerously_no_sandbox=True, disabled_layers=OFF)
    r = _agent_reads_own_environ(policy, dumpable="dumpable")
    assert SECRET in r["stdout"]


def test_forget_environ_wipes_proc_environ():
    code = (
        "import os; from m3agent.tools.sandbox.selfguard import forget_environ;"
        "w = forget_environ(['M3AGENT_TEST_API_KEY']);"
        "print(w, 'M3AGENT_TEST_API_KEY' in os.environ, open('/proc/self/environ','rb').read())"
    )
    env = {**os.environ, "M3AGENT_TEST_API_KEY": SECRET}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.startswith("['M3AGENT_TEST_API_KEY'] False"), out.stdout + out.stderr
    assert SECRET not in out.stdout
    control = subprocess.run(
        [sys.executable, "-c", "print(open('/proc/self/environ','rb').read())"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert SECRET in control.stdout


# -- metadata outside the writable roots ----------------------------------------------------------

META = {"chown": "EPERM", "setxattr": "EPERM"}


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("op", META)
def test_metadata_change_outside_refused(op, config, world):
    victim = world.outside / "victim.txt"
    before = os.stat(victim)
    r, got = _got(make_sandbox(config, world), action_argv(op, victim))
    assert SandboxLayer.SECCOMP in r.layers and not got["ok"] and got["errno"] == META[op], got
    assert os.listxattr(victim) == [] and os.stat(victim).st_ctime == before.st_ctime


@pytest.mark.parametrize("op", META)
def test_control_metadata_change_outside_unconfined(op, world):
    victim = world.outside / "victim.txt"
    _, got = _got(_open(world), action_argv(op, victim))
    if not got["ok"] and got["errno"] == "ENOTSUP":
        pytest.skip("this file system has no user xattrs")
    assert got["ok"], got


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("op", ["chmod", "utime"])
def test_mode_and_times_outside(op, config, world):
    """bubblewrap refuses (read-only mount); without it this is the gap `doctor` names."""
    victim = world.outside / "victim.txt"
    before = os.stat(victim)
    r, got = _got(make_sandbox(config, world), action_argv(op, victim))
    if config == "bwrap":
        assert not got["ok"] and got["errno"] == "EROFS", got
        assert os.stat(victim).st_mtime == before.st_mtime
    else:
        assert got["ok"], got  # Landlock does not govern chmod/utime; seccomp cannot see paths
        from m3agent.tools.sandbox.report import gaps

        assert any("chmod" in g for g in gaps(sb_report(world)))


def sb_report(world):
    return make_sandbox("no-bwrap", world).report


def test_full_access_keeps_privileges_and_metadata(world):
    """full-access confines no file system: chown works and root keeps its capabilities."""
    sb = Sandbox(SandboxPolicy(workspace=world.ws, mode=SandboxMode.FULL_ACCESS))
    r, got = _got(sb, action_argv("chown", world.outside / "victim.txt"))
    assert SandboxLayer.PRIVILEGES not in r.layers and got["ok"], got
    if os.geteuid() == 0:
        _, got = _got(sb, action_argv("caps"))
        assert int(json.loads(got["data"])["CapEff"], 16) != 0
