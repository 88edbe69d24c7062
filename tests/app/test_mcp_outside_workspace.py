"""Issue 37 item 5: a stdio MCP server kept in the home directory, outside the workspace, is
hidden by its sandbox; the error says so and how to allow it, and with the directory in the
config's [sandbox] allow_read the same server starts. `m3agent run` (the console script) with
a real MCP server (the SDK's) and the scripted engine."""

from __future__ import annotations

import json
import subprocess
import sys

from mcp_support import write_server

from ..support.cli import CONSOLE_SCRIPT, cli_env

SCRIPT = '["<mm:think>Nothing to do.</mm:think>Done."]'


def test_a_server_in_the_hidden_home_is_named_and_allow_read_lets_it_start(tmp_path):
    me = tmp_path / "me"  # the user's home for this run
    server = write_server(me / "mcp-servers")
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "script.json").write_text(SCRIPT)
    mcp = tmp_path / "mcp.json"
    mcp.write_text(
        json.dumps({"mcpServers": {"notes": {"command": sys.executable, "args": [str(server)]}}})
    )
    home = tmp_path / "m3home"
    env = {**cli_env(home), "HOME": str(me)}

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            [*CONSOLE_SCRIPT, "run", "--engine", "scripted", "--script",
             str(tmp_path / "script.json"), "--mcp-config", str(mcp), "--accept-sandbox-gaps",
             "hi"],
            env=env, cwd=work, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    r = run()
    assert r.returncode == 0 and r.stdout == "Done.\n", r.stderr
    errors = [line for line in r.stderr.splitlines() if "notes" in line]
    assert len(errors) == 1, r.stderr
    assert (
        f"{server} is in the home directory, which the sandbox hides from servers outside the "
        "workspace: keep the server in the workspace, or add its directory to allow_read in "
        "the config's [sandbox] table (docs/mcp.md)"
    ) in errors[0]
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text('[sandbox]\nallow_read = ["~/mcp-servers"]\n')
    r = run()
    assert r.returncode == 0 and "notes" not in r.stderr, r.stderr
