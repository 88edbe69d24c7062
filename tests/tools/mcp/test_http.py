"""Remote servers: the SDK's streamable HTTP (and older SSE) server on 127.0.0.1 in a
subprocess, reached with the headers from the config, called through the agent loop."""

from __future__ import annotations

import json

import pytest
from m3agent.app.settings import load_settings
from m3agent.tools.mcp import mcp_hub
from mcp_support import answer, calls, finished, invoke, start_http_server, write_server


@pytest.fixture
def http_server(tmp_path):
    script = write_server(tmp_path / "srv")
    procs = []

    def start(transport: str = "streamable-http") -> int:
        proc, port = start_http_server(script, transport)
        procs.append(proc)
        return port

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_streamable_http_with_headers_from_the_environment(
    home, repo, tmp_path, http_server, open_session, drive, monkeypatch
):
    port = http_server()
    monkeypatch.setenv("DEMO_TOKEN", "abc123")
    cfg = tmp_path / "remote.json"
    cfg.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "remote": {
                        "type": "http",
                        "url": f"http://127.0.0.1:{port}/mcp",
                        "headers": {"Authorization": "Bearer ${DEMO_TOKEN}"},
                    }
                }
            }
        )
    )
    settings = load_settings().override(mcp_config_files=(str(cfg),))
    script = [
        calls(invoke("mcp__remote__whoami"), invoke("mcp__remote__add", a=20, b=22)),
        answer("done"),
    ]
    session = open_session(settings, repo, script)
    (status,) = mcp_hub(session.toolset).statuses()
    assert status.state.value == "ready" and "2026-07-28" in status.detail
    events, done = drive(session, "who")
    who, add = finished(events)
    assert who.output == "Bearer abc123"
    assert add.output.startswith("42") and done.reason == "done"


def test_codex_url_table_with_a_bearer_token_variable(
    home, repo, http_server, user_config, open_session, drive, monkeypatch
):
    port = http_server()
    monkeypatch.setenv("CODEX_STYLE_TOKEN", "t0k")
    user_config(
        f'[mcp_servers.remote]\nurl = "http://127.0.0.1:{port}/mcp"\n'
        'bearer_token_env_var = "CODEX_STYLE_TOKEN"\n'
    )
    script = [calls(invoke("mcp__remote__whoami")), answer("done")]
    events, _ = drive(open_session(load_settings(), repo, script), "who")
    assert finished(events)[0].output == "Bearer t0k"


def test_sse_transport_for_older_servers(home, repo, tmp_path, http_server, open_session, drive):
    port = http_server("sse")
    cfg = tmp_path / "sse.json"
    cfg.write_text(
        json.dumps({"mcpServers": {"old": {"type": "sse", "url": f"http://127.0.0.1:{port}/sse"}}})
    )
    settings = load_settings().override(mcp_config_files=(str(cfg),))
    script = [calls(invoke("mcp__old__add", a=1, b=2)), answer("3")]
    events, _ = drive(open_session(settings, repo, script), "add")
    (add,) = finished(events)
    assert not add.is_error and add.output.startswith("3")


def test_a_server_that_went_away_is_an_error_then_comes_back(
    home, repo, tmp_path, open_session, drive
):
    script_path = write_server(tmp_path / "srv")
    proc, port = start_http_server(script_path)
    cfg = tmp_path / "remote.json"
    cfg.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "remote": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp", "timeout": 5}
                }
            }
        )
    )
    settings = load_settings().override(mcp_config_files=(str(cfg),))
    script = [
        calls(invoke("mcp__remote__add", a=1, b=1)),
        answer("gone"),
        calls(invoke("mcp__remote__add", a=2, b=2)),
        answer("back"),
    ]
    session = open_session(settings, repo, script)
    proc.kill()
    proc.wait()
    procs = []

    def restart(req):  # the approval of the second call: bring the server back first
        if req.arguments == {"a": 2, "b": 2}:
            procs.append(start_http_server(script_path, port=port)[0])
        return "approve"

    try:
        events, _ = drive(session, "add", "add again", decide=restart)
        gone, back = finished(events)
        assert gone.is_error and "MCP server remote" in gone.output
        assert not back.is_error and back.output.startswith("4")
        assert mcp_hub(session.toolset).statuses()[0].restarts == 1
    finally:
        for p in procs:
            p.kill()
