"""The resource and process part of the escape battery, with and without bubblewrap:
fork bomb, memory hog, disk filling, CPU hog, a setsid child that outlives the timeout, a
background process left behind (the environment: test_escape_credentials.py)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from m3agent.tools.sandbox.policy import SandboxLayer
from sandbox_support import CONFIGS, action_argv, make_sandbox


def _result(r):
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no result; exit {r.exit_code}; stderr: {r.stderr[-2000:]}"
    return json.loads(lines[-1])


@pytest.mark.parametrize("config", CONFIGS)
def test_fork_bomb_is_capped(config, world):
    sb = make_sandbox(config, world, nproc=64)
    r = sb.run(action_argv("fork_bomb", 2000), timeout_s=60)
    if SandboxLayer.CGROUP not in r.layers and os.geteuid() == 0:
        # root is exempt from RLIMIT_NPROC; without a pids cgroup the launcher's watchdog acts
        assert "more than 64 processes; all were killed" in r.stderr, r.stderr
        return
    got = _result(r)
    layer = SandboxLayer.CGROUP if SandboxLayer.CGROUP in r.layers else SandboxLayer.RLIMITS
    assert not got["ok"] and got["errno"] == "EAGAIN", got
    assert got["made"] < 100, f"{got['made']} processes were created ({layer} should cap at 64)"


@pytest.mark.parametrize("config", CONFIGS)
def test_memory_hog_is_refused(config, world):
    sb = make_sandbox(config, world, as_mb=512)
    r = sb.run(action_argv("memory_hog", 1024), timeout_s=60)
    got = _result(r)
    assert SandboxLayer.RLIMITS in r.layers
    assert not got["ok"] and got["errno"] == "MemoryError", got


@pytest.mark.parametrize("config", CONFIGS)
def test_disk_fill_is_stopped(config, world):
    sb = make_sandbox(config, world, fsize_mb=8)
    r = sb.run(action_argv("disk_fill", world.ws / "src" / "big.bin", 64), timeout_s=60)
    got = _result(r)
    assert not got["ok"] and got["errno"] == "EFBIG", got  # RLIMIT_FSIZE
    assert (world.ws / "src" / "big.bin").stat().st_size <= 8 * 1024 * 1024


@pytest.mark.parametrize("config", CONFIGS)
def test_cpu_hog_is_killed_by_rlimit(config, world):
    sb = make_sandbox(config, world, cpu_s=1)
    t0 = time.monotonic()
    r = sb.run(action_argv("cpu_hog"), timeout_s=30)
    assert not r.timed_out, "RLIMIT_CPU should end it long before the timeout"
    assert r.exit_code == 128 + signal.SIGXCPU, (r.exit_code, r.stderr)
    assert time.monotonic() - t0 < 15


def _run_heartbeat(config, world, name: str, command: str, timeout_s: float):
    """Runs the shell COMMAND in a sandbox of config, its {heartbeat} a process in its own
    session that touches ws/src/NAME every 0.1 s; returns the result and that marker."""
    marker = world.ws / "src" / name
    heartbeat = f"setsid sh -c 'while true; do touch {marker}; sleep 0.1; done'"
    r = make_sandbox(config, world).run(command.format(heartbeat=heartbeat), timeout_s=timeout_s)
    return r, marker


def _heartbeat_stopped(marker, seconds=1.0):
    if marker.exists():
        marker.unlink()
    time.sleep(seconds)
    return not marker.exists()


@pytest.mark.parametrize("config", CONFIGS)
def test_setsid_child_does_not_outlive_timeout(config, world):
    cmd = "{heartbeat} </dev/null >/dev/null 2>&1 & sleep 30"
    r, marker = _run_heartbeat(config, world, "alive", cmd, timeout_s=1.5)
    assert r.timed_out
    assert marker.exists(), "the setsid child never ran"
    assert _heartbeat_stopped(marker), "the setsid child survived the timeout"
    expected = (
        "pid-namespace"
        if config == "bwrap"
        else ("cgroup" if SandboxLayer.CGROUP in r.layers else "subreaper")
    )
    if config == "bwrap" and SandboxLayer.CGROUP in r.layers:
        expected = "cgroup"  # the cgroup kill runs last and is what the runner reports
    assert r.killed_by == expected


@pytest.mark.parametrize("config", CONFIGS)
def test_background_process_is_killed_when_command_ends(config, world):
    cmd = "({heartbeat} &) ; sleep 0.5; echo done"
    r, marker = _run_heartbeat(config, world, "bg", cmd, timeout_s=20)
    assert not r.timed_out and r.stdout.strip() == "done"
    assert r.duration_s < 10, "a background process holding stdout must not hang the tool"
    assert _heartbeat_stopped(marker), "a double-forked setsid process outlived the command"


def test_fork_bomb_without_cgroup_or_bwrap(world):
    """The weakest configuration: no bubblewrap, no cgroup. RLIMIT_NPROC caps a normal user;
    root is exempt from it, so there the launcher's process-count watchdog kills the tree."""
    from m3agent.tools.sandbox.policy import Limits, SandboxPolicy
    from m3agent.tools.sandbox.runner import Sandbox

    policy = SandboxPolicy(
        workspace=world.ws,
        disabled_layers=frozenset({SandboxLayer.BWRAP, SandboxLayer.CGROUP}),
        limits=Limits(nproc=64),
    )
    sb = Sandbox(policy)
    if not sb.report.protective:
        pytest.skip("no confining layer on this machine")
    t0 = time.monotonic()
    r = sb.run(action_argv("fork_bomb", 2000), timeout_s=60)
    assert time.monotonic() - t0 < 30
    if os.geteuid() == 0:
        assert "more than 64 processes; all were killed" in r.stderr, (r.stdout, r.stderr)
        assert r.exit_code == 137
    else:
        got = _result(r)
        assert not got["ok"] and got["errno"] == "EAGAIN" and got["made"] < 100, got


def test_stale_cgroups_are_swept(tmp_path):
    """A group left by an agent killed mid-command is removed by the next create once it is
    empty and old; one with members (a running command) is never touched."""
    from m3agent.tools.sandbox import cgroup

    root = tmp_path / "pids"
    (root / "m3agent-stale").mkdir(parents=True)
    (root / "m3agent-fresh").mkdir()
    (root / "other").mkdir()
    old = os.stat(root).st_mtime - 2 * cgroup.STALE_S
    os.utime(root / "m3agent-stale", (old, old))
    os.utime(root / "other", (old, old))
    cgroup._sweep(root)
    assert sorted(p.name for p in root.iterdir()) == ["m3agent-fresh", "other"]
