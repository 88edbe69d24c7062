"""`m3agent run`'s sandbox flags reach the shell's sandbox: --add-dir, --network, and a bad
--add-dir refused before anything runs."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from m3agent.app import exit_codes
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox


@pytest.fixture()
def protective(repo):
    if not Sandbox(SandboxPolicy(workspace=repo)).report.protective:
        pytest.skip("no sandbox layer works on this machine")


def _shell_run(cli, m3, repo, command, *flags):
    script = cli.script(m3.calls(m3.invoke("shell", command=command)), m3.answer("done"))
    r = cli.run_scripted(
        "go", script, repo, "--approval", "never", "--output-format", "stream-json", *flags
    )
    assert r.returncode == 0, r.stderr
    (finished,) = [e for e in m3.events(r.stdout) if e["type"] == "tool_call_finished"]
    return finished


def test_add_dir_makes_another_directory_writable(cli, m3, repo, tmp_path, protective):
    other = tmp_path / "other"
    other.mkdir()
    cmd = f"echo hi > {other}/made.txt"
    blocked = _shell_run(cli, m3, repo, cmd)
    assert not (other / "made.txt").exists(), blocked
    allowed = _shell_run(cli, m3, repo, cmd, "--add-dir", str(other))
    assert (other / "made.txt").read_text() == "hi\n", allowed


def test_network_flag_lets_commands_connect(cli, m3, repo, protective):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    got: list[bytes] = []

    def serve():
        srv.settimeout(20)
        try:
            while True:
                conn, _ = srv.accept()
                got.append(conn.recv(16))
                conn.close()
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    cmd = (
        f"python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {port}), 5); "
        "s.sendall(b'ping')\""
    )
    try:
        off = _shell_run(cli, m3, repo, cmd)
        assert off["is_error"] and got == [], off
        on = _shell_run(cli, m3, repo, cmd, "--network")
        assert not on["is_error"] and got == [b"ping"], on
    finally:
        srv.close()


def test_missing_add_dir_is_a_usage_error(cli, repo, tmp_path):
    script = cli.script("unused")
    r = cli.run_scripted(
        "go", script, repo, "--add-dir", str(tmp_path / "nope"), "--output-format", "json"
    )
    assert r.returncode == exit_codes.USAGE_ERROR
    assert "not a directory" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # issue 22: a run that fails before its session still prints one JSON result
    out = json.loads(r.stdout)
    assert out["type"] == "result" and out["is_error"] and out["exit_code"] == 2
