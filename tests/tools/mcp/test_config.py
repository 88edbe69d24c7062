"""Both configuration dialects as users write them, project trust, and the headless flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.app.settings import load_settings
from m3agent.tools.mcp.config import Scope, Transport, from_codex, parse_mcp_json
from mcp_support import answer, calls, invoke

from ...support.cli import scripted_run

M3AGENT = str(Path(sys.executable).parent / "m3agent")


def claude_file(repo: Path, server: Path, **entry) -> Path:
    """A .mcp.json exactly as Claude Code writes one."""
    body = {
        "mcpServers": {
            "demo": {
                "command": sys.executable,
                "args": [str(server)],
                "env": {"GREETING": "bonjour"},  # a project entry expands no ${VAR}
                **entry,
            }
        }
    }
    path = repo / ".mcp.json"
    path.write_text(json.dumps(body, indent=2))
    return path


def test_claude_format_parses_stdio_http_and_sse():
    data = {
        "mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "@x/fs", "${ROOT}"], "env": {"K": "${K:-d}"}},
            "web": {"type": "http", "url": "https://h/mcp", "headers": {"A": "Bearer ${TOK}"}},
            "old": {"type": "sse", "url": "http://h/sse"},
        }
    }
    fs, web, old = parse_mcp_json(
        data, scope=Scope.FLAG, source="x", env={"ROOT": "/r", "TOK": "t"}
    )  # a file the user named expands; a project's may not (test_launcher_env.py)
    assert fs.transport is Transport.STDIO and fs.args == ("-y", "@x/fs", "/r")
    assert dict(fs.env) == {"K": "d"} and fs.scope is Scope.FLAG
    assert web.transport is Transport.HTTP and dict(web.headers) == {"A": "Bearer t"}
    assert old.transport is Transport.SSE


def test_codex_format_parses_its_keys():
    table = {
        "command": "srv",
        "args": ["a"],
        "env": {"X": "1"},
        "env_vars": ["PASSED"],
        "startup_timeout_sec": 5,
        "tool_timeout_sec": 9,
        "enabled_tools": ["t1"],
        "disabled_tools": ["t2"],
        "network": True,
    }
    s = from_codex("local", table, source="c.toml", env={"PASSED": "p"})
    assert dict(s.env) == {"X": "1", "PASSED": "p"} and s.network
    assert (s.startup_timeout_s, s.tool_timeout_s) == (5.0, 9.0)
    assert s.wants_tool("t1") and not s.wants_tool("t2") and not s.wants_tool("t3")
    r = from_codex(
        "remote",
        {"url": "https://h/mcp", "bearer_token_env_var": "TOK"},
        source="c.toml",
        env={"TOK": "sekrit"},
    )
    assert r.transport is Transport.HTTP and dict(r.headers) == {"Authorization": "Bearer sekrit"}


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"command": "x", "colour": "red"}, "unknown key(s) colour"),
        ({"type": "stdio"}, "a stdio server needs a command"),
        ({"type": "http", "url": "ftp://h"}, "url must start with http://"),
        ({"type": "websocket", "url": "http://h"}, "unknown type 'websocket'"),
        ({"command": "x", "env": {"A": "${UNSET_VAR_XYZ}"}}, "UNSET_VAR_XYZ is not set"),
        ({"command": "x", "args": "not a list"}, "args must be a list of strings"),
    ],
)
def test_bad_entries_are_one_line_errors(entry, message):
    with pytest.raises(ValueError, match="MCP server 'srv'") as info:
        parse_mcp_json({"mcpServers": {"srv": entry}}, scope=Scope.USER, source="f", env={})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_names_that_would_break_tool_names_are_refused():
    for bad in ("a__b", "has space", "-lead"):
        with pytest.raises(ValueError, match="no '__'"):
            parse_mcp_json(
                {"mcpServers": {bad: {"command": "x"}}}, scope=Scope.USER, source="f", env={}
            )


def test_bad_user_config_names_the_file(home, user_config):
    path = user_config('[mcp_servers.x]\ncommand = "a"\nbogus = 1\n')
    with pytest.raises(ValueError, match="unknown key"):
        load_settings()
    assert path.exists()


def test_project_servers_need_trust_and_a_changed_entry_needs_it_again(
    home, repo, server, open_session, drive, monkeypatch
):
    from m3agent.app.mcp.settings import trust

    claude_file(repo, server)
    cfg = load_settings().mcp_config(repo)
    assert cfg.servers == () and "not trusted yet" in cfg.skipped[0]
    (demo,) = load_settings().override(trust_project_mcp=True).mcp_config(repo).servers
    trust(home, repo, [demo])
    script = [calls(invoke("mcp__demo__env", name="GREETING")), answer("hi")]
    session = open_session(load_settings(), repo, script)
    events, _ = drive(session, "greet")
    from mcp_support import finished

    assert finished(events)[0].output == "bonjour"  # the entry's variable, set in the sandbox
    claude_file(repo, server, args=[str(server), "--changed"])
    assert load_settings().mcp_config(repo).servers == ()


def test_headless_run_skips_an_untrusted_project_server_with_one_line(home, repo, server, tmp_path):
    claude_file(repo, server)
    script = tmp_path / "s.json"
    script.write_text(json.dumps([calls(invoke("mcp__demo__add", a=1, b=1)), answer("x")]))
    base = [M3AGENT, *scripted_run("add", script, repo, "--approval", "never", "--no-context")]
    proc = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    warn = [x for x in proc.stderr.splitlines() if "not trusted" in x]
    assert len(warn) == 1 and "m3agent mcp trust" in warn[0]
    assert "unknown tool 'mcp__demo__add'" in proc.stderr
    script.write_text(json.dumps([calls(invoke("mcp__demo__add", a=1, b=1)), answer("x")]))
    proc = subprocess.run(
        [*base, "--trust-project-mcp"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "not trusted" not in proc.stderr
    assert "> mcp__demo__add" in proc.stderr and "[ok] 2" in proc.stderr


def test_strict_mcp_config_uses_only_the_given_file(
    home, repo, server, tmp_path, user_config, stdio_config
):
    user_config(stdio_config("fromuser", server))
    flag = tmp_path / "only.json"
    flag.write_text(
        json.dumps({"mcpServers": {"fromflag": {"command": sys.executable, "args": [str(server)]}}})
    )
    s = load_settings().override(mcp_config_files=(str(flag),), strict_mcp_config=True)
    assert [x.name for x in s.mcp_config(repo).servers] == ["fromflag"]
    s = load_settings().override(mcp_config_files=(str(flag),))
    assert [x.name for x in s.mcp_config(repo).servers] == ["fromuser", "fromflag"]


def test_a_repository_cannot_switch_off_a_user_server_by_reusing_its_name(
    home, repo, server, user_config, stdio_config
):
    user_config(stdio_config("demo", server))
    claude_file(repo, server, args=[str(server), "--evil"])
    cfg = load_settings().mcp_config(repo)
    (demo,) = cfg.servers
    assert demo.scope is Scope.USER and demo.args == (str(server),)
    assert "not trusted yet" in cfg.skipped[0]


def test_server_tool_names_and_descriptions_are_made_safe_for_the_prompt():
    from m3agent.tools.mcp.adapter import MAX_DESCRIPTION_CHARS, McpTool
    from mcp_types import Tool

    odd = Tool(
        name="get file/../x y",
        description="d" * 10_000,
        input_schema={"type": "object", "title": "noise", "properties": {}},
    )
    tool = McpTool(None, "srv", odd)
    schema = tool.schema()["function"]
    assert schema["name"] == "mcp__srv__get_file____x_y" and tool.remote_name == odd.name
    assert len(schema["description"]) == MAX_DESCRIPTION_CHARS
    assert "title" not in schema["parameters"]
