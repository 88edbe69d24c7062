"""`m3agent mcp add|list|get|remove|trust` and `m3agent doctor`, through the installed
console script, against an isolated home."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

from ...support.cli import CONSOLE_SCRIPT, run_cli


def m3(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    return run_cli(home, *args, cwd=cwd, command=CONSOLE_SCRIPT, timeout=120)


def add_stdio_server(home: Path, repo: Path, server: Path, *words: str) -> None:
    """`m3agent mcp add WORDS -- python SERVER`, which succeeds."""
    r = m3("mcp", "add", *words, "--", sys.executable, str(server), cwd=repo, home=home)
    assert r.returncode == 0, r.stderr


def test_add_list_get_remove_in_the_user_config(home, repo, server):
    (home).mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('# my settings\nthinking = "enabled"\n')
    add_stdio_server(home, repo, server, "demo", "-e", "API_TOKEN=s3cret")
    r = m3(
        "mcp",
        "add",
        "web",
        "--url",
        "http://127.0.0.1:9/mcp",
        "-H",
        "Authorization: Bearer x",
        cwd=repo,
        home=home,
    )
    assert r.returncode == 0, r.stderr
    text = (home / "config.toml").read_text()
    assert text.startswith("# my settings\n")  # the user's own lines stay
    data = tomllib.loads(text)
    assert data["mcp_servers"]["demo"] == {
        "command": sys.executable,
        "args": [str(server)],
        "env": {"API_TOKEN": "s3cret"},
    }
    assert data["mcp_servers"]["web"]["http_headers"] == {"Authorization": "Bearer x"}
    r = m3("mcp", "list", cwd=repo, home=home)
    assert r.stdout.splitlines() == [
        f"demo  user  {sys.executable} {server}",
        "web  user  http http://127.0.0.1:9/mcp",
    ]
    r = m3("mcp", "get", "demo", "--json", cwd=repo, home=home)
    got = json.loads(r.stdout)
    assert got["env"] == {"API_TOKEN": "***"} and got["trusted"] is True  # secrets not shown
    r = m3("mcp", "add", "demo", "--", "x", cwd=repo, home=home)
    assert r.returncode == 2 and "already has an MCP server 'demo'" in r.stderr
    r = m3("mcp", "remove", "demo", cwd=repo, home=home)
    assert r.returncode == 0
    assert list(tomllib.loads((home / "config.toml").read_text())["mcp_servers"]) == ["web"]
    r = m3("mcp", "remove", "demo", cwd=repo, home=home)
    assert r.returncode == 2 and "no MCP server named 'demo'" in r.stderr
    r = m3("mcp", "get", "nope", cwd=repo, home=home)
    assert r.returncode == 2


def test_project_scope_writes_mcp_json_and_trust_is_asked_once(home, repo, server):
    add_stdio_server(home, repo, server, "-s", "project", "demo")
    data = json.loads((repo / ".mcp.json").read_text())
    assert data == {"mcpServers": {"demo": {"command": sys.executable, "args": [str(server)]}}}
    r = m3("mcp", "list", cwd=repo, home=home)
    assert "(not trusted: `m3agent mcp trust`)" in r.stdout
    r = m3("mcp", "trust", cwd=repo, home=home)
    assert r.returncode == 0 and "trusting demo" in r.stdout
    assert "not trusted" not in m3("mcp", "list", cwd=repo, home=home).stdout
    r = m3("mcp", "remove", "-s", "project", "demo", cwd=repo, home=home)
    assert r.returncode == 0 and json.loads((repo / ".mcp.json").read_text())["mcpServers"] == {}


def test_add_refuses_bad_input_with_one_line(home, repo):
    for args, msg in [
        (("bad__name", "--", "x"), "no '__'"),
        (("a",), "give either a command"),
        (("a", "--url", "http://h", "--", "x"), "give either a command"),
        (("a", "-e", "NOEQUALS", "--", "x"), "expected KEY=VALUE"),
    ]:
        r = m3("mcp", "add", *args, cwd=repo, home=home)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1


def test_doctor_starts_and_checks_the_servers(home, repo, server):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f"[mcp_servers.demo]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(server))}]\n"
        '[mcp_servers.ghost]\ncommand = "/no/such/server"\n'
    )
    r = m3("doctor", "--json", "--cwd", str(repo), cwd=repo, home=home)
    report = json.loads(r.stdout)
    demo, ghost = report["mcp"]
    assert demo["state"] == "ready" and "add" in demo["tools"]
    assert ghost["state"] == "failed" and "No such file or directory" in ghost["detail"]
    r = m3("doctor", "--cwd", str(repo), cwd=repo, home=home)
    assert "mcp        demo: ok, 14 tools" in r.stdout
    assert "mcp        ghost: failed:" in r.stdout
