"""Diagnostics after edits end to end: the installed console script with a [diagnostics]
checker (ruff) in the config, a scripted model that writes a file with a mistake and then
fixes it; the checker's findings reach the model in the same turn, in the tool result."""

from __future__ import annotations

import sys
from pathlib import Path

from m3agent.agent.conversation import Conversation

from ..support.cli import CONSOLE_SCRIPT, run_cli, scripted_run

RUFF = Path(sys.executable).parent / "ruff"


def test_findings_follow_the_edit_in_the_same_turn(cli, repo, home, m3):
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        "[diagnostics.extensions]\n"
        f'py = "{RUFF} check --quiet --no-cache --output-format=concise {{files}}"\n'
    )
    script = cli.script(
        m3.calls(m3.invoke("write_file", path="tool.py", content="import os\n\nx = 1\n")),
        m3.calls(m3.invoke("edit_file", path="tool.py", old_string="import os\n\n", new_string="")),
        m3.calls(m3.invoke("write_file", path="NOTES.md", content="# notes\n")),
        m3.answer("Done; the checker is clean."),
    )
    r = run_cli(
        home,
        *scripted_run("add tool.py", script, repo, "--output-format", "stream-json"),
        command=CONSOLE_SCRIPT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    done = [e for e in m3.events(r.stdout) if e["type"] == "tool_call_finished"]
    first, second, notes = (e["output"] for e in done)
    assert "[diagnostics for tool.py (`" in first and "tool.py:1:8: F401" in first
    assert "[diagnostics: no findings for tool.py (`" in second
    assert "diagnostics" not in notes  # no checker for .md
    # what the model read on its next request: the tool message in the session log
    sid = m3.events(r.stdout)[0]["session_id"]
    tools = [m for m in Conversation.load(home / "sessions", sid).messages if m.role == "tool"]
    assert "tool.py:1:8: F401" in tools[0].content


def test_a_language_servers_findings_follow_the_edit_and_it_stops_with_the_run(cli, repo, home, m3):
    server = repo / "lsp_server.py"
    server.write_text((Path(__file__).parents[1] / "tools" / "lsp_fake_server.py").read_text())
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(f'[diagnostics.lsp]\ntxt = "{sys.executable} -I {server}"\n')
    script = cli.script(
        m3.calls(m3.invoke("write_file", path="plan.txt", content="step one\nBAD step\n")),
        m3.calls(m3.invoke("write_file", path="plan.txt", content="step one\n")),
        m3.answer("Done; the server is happy."),
    )
    r = run_cli(
        home,
        *scripted_run("write the plan", script, repo, "--output-format", "stream-json"),
        command=CONSOLE_SCRIPT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    first, second = (e["output"] for e in m3.events(r.stdout) if e["type"] == "tool_call_finished")
    assert "[diagnostics for plan.txt (language server `" in first
    assert "plan.txt:2:1: error: BAD is not allowed here [fake-lsp n1]" in first
    assert "[diagnostics: no findings for plan.txt (language server `" in second
    sid = m3.events(r.stdout)[0]["session_id"]
    tools = [m for m in Conversation.load(home / "sessions", sid).messages if m.role == "tool"]
    assert "plan.txt:2:1: error: BAD" in tools[0].content  # what the model read next
    assert (repo / "lsp-exited").read_text() == "clean\n"  # shut down when the run ended
