"""Attacks first: a stdio server runs under the session's sandbox (no writes outside the
workspace, no network unless its config says so, no secrets from m3agent's environment), and
every MCP tool goes through approvals (server and tool rules, a persisted "always allow")."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from m3agent.app.settings import load_settings
from m3agent.tools.sandbox.policy import SandboxLayer
from mcp_support import answer, calls, finished, invoke


def test_server_cannot_write_outside_the_workspace(
    home, repo, server, tmp_path, user_config, stdio_config, open_session, drive
):
    user_config(stdio_config("demo", server))
    outside = tmp_path / "outside.txt"
    inside = repo / "inside.txt"
    script = [
        calls(
            invoke("mcp__demo__write", path=str(outside)),
            invoke("mcp__demo__write", path=str(inside)),
        ),
        answer("tried"),
    ]
    events, _ = drive(open_session(load_settings(), repo, script), "write")
    out, ins = finished(events)
    assert not outside.exists()
    assert out.output.startswith("refused")
    assert ins.output.startswith("written") and inside.read_text() == "x"


def test_server_env_is_the_allow_list_plus_its_own(
    home, repo, server, user_config, stdio_config, open_session, drive, monkeypatch
):
    monkeypatch.setenv("LEAKY_API_TOKEN", "from-m3agent")
    monkeypatch.setenv("PLAIN_SETTING", "also-from-m3agent")
    user_config(stdio_config("demo", server) + 'env = { SERVER_TOKEN = "given-to-it" }\n')
    script = [
        calls(
            invoke("mcp__demo__env", name="LEAKY_API_TOKEN"),
            invoke("mcp__demo__env", name="PLAIN_SETTING"),
            invoke("mcp__demo__env", name="SERVER_TOKEN"),
            invoke("mcp__demo__env", name="PATH"),
        ),
        answer("env"),
    ]
    events, _ = drive(open_session(load_settings(), repo, script), "env")
    leaky, plain, own, path = (r.output for r in finished(events))
    assert leaky == "<unset>" and plain == "<unset>"
    assert own == "given-to-it" and path != "<unset>"


def _server_groups(server: Path) -> list[Path]:
    """The m3agent pids cgroups that hold a process running this server script."""
    from m3agent.tools.sandbox.cgroup import _v1_root, _v2_root

    root = _v2_root() or _v1_root()
    out = []
    for group in root.glob("m3agent-*") if root else ():
        try:
            pids = (group / "cgroup.procs").read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if str(server).encode() in cmd:
                out.append(group)
                break
    return out


def test_a_stdio_server_runs_in_its_own_pids_cgroup_removed_when_it_stops(
    home, repo, server, user_config, stdio_config, open_session, drive
):
    from m3agent.tools.sandbox.policy import SandboxPolicy
    from m3agent.tools.sandbox.runner import Sandbox

    if not Sandbox(SandboxPolicy(workspace=repo)).report.is_active(SandboxLayer.CGROUP):
        pytest.skip("no writable pids cgroup on this machine")
    user_config(stdio_config("demo", server))
    session = open_session(load_settings(), repo, [answer("hi")])
    (group,) = _server_groups(server)
    assert (group / "pids.max").read_text().strip() == "512"
    drive(session, "hi")  # closes the session: the server stops, its group goes
    assert not group.exists()


def _listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s


def test_network_only_when_the_server_config_allows_it(
    home, repo, server, user_config, stdio_config, open_session, drive
):
    lst = _listener()
    port = lst.getsockname()[1]
    try:
        user_config(stdio_config("closed", server) + stdio_config("open", server, network=True))
        script = [
            calls(
                invoke("mcp__closed__connect", port=port), invoke("mcp__open__connect", port=port)
            ),
            answer("net"),
        ]
        events, _ = drive(open_session(load_settings(), repo, script), "net")
        closed, opened = finished(events)
        assert closed.output.startswith("refused")
        assert opened.output == "connected"
    finally:
        lst.close()


def test_rules_deny_a_server_and_allow_a_tool(
    home, repo, server, user_config, stdio_config, open_session, drive
):
    user_config(
        '[tools]\n"mcp__blocked" = "deny"\n"mcp__demo__add" = "allow"\n'
        + stdio_config("demo", server)
        + stdio_config("blocked", server)
    )
    script = [
        calls(
            invoke("mcp__blocked__add", a=1, b=1),
            invoke("mcp__demo__add", a=1, b=1),
            invoke("mcp__demo__env", name="HOME"),
        ),
        answer("done"),
    ]
    asked = []
    events, _ = drive(
        open_session(load_settings(), repo, script),
        "go",
        decide=lambda r: asked.append(r.name) or "deny",
    )
    blocked, add, env = finished(events)
    assert blocked.metadata.get("denied") and "denies the tool mcp__blocked__add" in blocked.output
    assert not add.is_error and add.output.startswith("2")
    assert env.metadata.get("denied") and asked == ["mcp__demo__env"]


def test_always_allow_is_persisted_for_later_sessions(
    home, repo, server, user_config, stdio_config, open_session, drive
):
    user_config(stdio_config("demo", server))
    asked = []

    def always(req):
        asked.append(req.name)
        return "approve_always"

    script = [calls(invoke("mcp__demo__add", a=1, b=1)), answer("2")]
    drive(open_session(load_settings(), repo, script), "first", decide=always)
    assert asked == ["mcp__demo__add"]
    saved = json.loads((home / "permissions.json").read_text())
    assert saved["allow"] == ["mcp__demo__add"]
    events, _ = drive(open_session(load_settings(), repo, script), "again", decide=always)
    assert asked == ["mcp__demo__add"]  # not asked the second time
    assert not finished(events)[0].is_error


def test_approval_never_runs_without_asking_and_a_glob_rule_matches(
    home, repo, server, user_config, stdio_config, open_session, drive
):
    user_config(
        'approval = "never"\n[tools]\n"mcp__demo__e*" = "deny"\n' + stdio_config("demo", server)
    )
    script = [
        calls(invoke("mcp__demo__add", a=5, b=5), invoke("mcp__demo__env", name="HOME")),
        answer("ok"),
    ]
    events, _ = drive(
        open_session(load_settings(), repo, script),
        "go",
        decide=lambda r: (_ for _ in ()).throw(AssertionError("asked")),
    )
    add, env = finished(events)
    assert add.output.startswith("10") and env.metadata.get("denied")
