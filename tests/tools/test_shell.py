"""The shell tool: output to files (100 MB is cut, no OOM, no hang), timeouts, interrupts."""

from __future__ import annotations

import resource
import threading
import time

import pytest
from m3agent.tools.base import ToolContext
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
from m3agent.tools.toolset import default_toolset


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    ws = tmp_path_factory.mktemp("shellws")
    return ws, Sandbox(SandboxPolicy(workspace=ws))


def _ctx(probed, **kw):
    ws, sb = probed
    return ToolContext(cwd=ws, sandbox=sb, **kw)


def test_exit_code_stdout_stderr(probed):
    r = default_toolset().dispatch(
        "shell", {"command": "echo out; echo err >&2; exit 3"}, _ctx(probed)
    )
    assert r.is_error and r.metadata["exit_code"] == 3
    assert "stdout:\nout" in r.output and "stderr:\nerr" in r.output


def test_100mb_of_output_is_truncated_without_oom_or_hang(probed):
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    r = default_toolset().dispatch(
        "shell",
        {"command": "head -c 104857600 /dev/zero | tr '\\0' 'x'; echo; echo END"},
        _ctx(probed),
    )
    elapsed = time.monotonic() - t0
    assert not r.is_error, r.output[-500:]
    assert r.metadata["truncated"] and r.metadata["stdout_bytes"] == 104857600 + 5
    assert "bytes of output cut" in r.output and r.output.rstrip().endswith("END")
    assert len(r.output) < 300_000
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grew_mb < 50, f"the agent process grew by {grew_mb:.0f} MB"
    assert elapsed < 60


def test_timeout_kills_the_tree(probed):
    ws, _ = probed
    r = default_toolset().dispatch(
        "shell", {"command": "sleep 30 & sleep 30", "timeout_s": 1}, _ctx(probed)
    )
    assert r.is_error and r.metadata["timed_out"] and "timed out after 1s" in r.output
    assert r.metadata["duration_s"] < 10


def test_interrupt_stops_the_command(probed):
    ctx = _ctx(probed)
    threading.Timer(0.5, ctx.cancel.set).start()
    t0 = time.monotonic()
    r = default_toolset().dispatch("shell", {"command": "sleep 30"}, ctx)
    assert r.is_error and "interrupted" in r.output
    assert time.monotonic() - t0 < 10


def test_workdir_and_bad_workdir(probed):
    ws, _ = probed
    (ws / "sub").mkdir(exist_ok=True)
    r = default_toolset().dispatch("shell", {"command": "pwd", "workdir": "sub"}, _ctx(probed))
    assert r.output.splitlines()[-1] == str(ws / "sub")
    r = default_toolset().dispatch("shell", {"command": "pwd", "workdir": "nope"}, _ctx(probed))
    assert r.is_error and "no such directory" in r.output


def test_network_off_by_default_but_on_when_allowed(tmp_path):
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    cmd = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3); print('connected')\""
    off = default_toolset().dispatch("shell", {"command": cmd}, ToolContext(cwd=tmp_path))
    assert off.is_error and "Operation not permitted" in off.output
    on = Sandbox(SandboxPolicy(workspace=tmp_path, network=True))
    r = default_toolset().dispatch("shell", {"command": cmd}, ToolContext(cwd=tmp_path, sandbox=on))
    assert not r.is_error and "connected" in r.output
    srv.close()
