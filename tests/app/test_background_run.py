"""Background commands end to end: the installed console script runs a scripted model whose
M3 markup starts a command in the background, reads its output with shell_output, and ends;
the command is killed when the run ends."""

from __future__ import annotations

import time

from ..support.cli import CONSOLE_SCRIPT, run_cli, scripted_run

TICKER = "while true; do echo x >> ticks; sleep 0.02; done"


def test_run_in_background_read_later_killed_at_the_end(cli, repo, home, m3):
    script = cli.script(
        m3.calls(
            m3.invoke(
                "shell",
                command=f"echo serving; touch up; {TICKER}",
                run_in_background="true",
            ),
            reasoning="Start the server in the background.",
        ),
        m3.calls(m3.invoke("shell", command="while [ ! -e up ]; do sleep 0.02; done; echo up")),
        m3.calls(m3.invoke("shell_output", job_id="b1")),
        m3.calls(m3.invoke("shell_output")),
        m3.answer("The server is up."),
    )
    r = run_cli(
        home,
        *scripted_run("start it", script, repo, "--output-format", "stream-json"),
        command=CONSOLE_SCRIPT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    done = [e for e in m3.events(r.stdout) if e["type"] == "tool_call_finished"]
    assert [e["name"] for e in done] == ["shell", "shell", "shell_output", "shell_output"]
    assert not any(e["is_error"] for e in done), done
    assert done[0]["output"].startswith("started in the background as b1")
    assert done[2]["output"].startswith("b1: running after ")
    assert "stdout (new):\nserving" in done[2]["output"]
    assert done[3]["output"].startswith("b1: running after ") and TICKER in done[3]["output"]
    # the run is over: its background command was killed with the session
    ticks = repo / "ticks"
    size = ticks.stat().st_size
    time.sleep(0.3)
    assert ticks.stat().st_size == size


def test_an_mcp_reload_leaves_background_commands_running(tmp_path):
    """/mcp reload carries the shell tools into the new tool set and stops only the old MCP
    servers (app/mcp/reload.py): the commands they started go on."""
    from m3agent.app.mcp.reload import _close
    from m3agent.tools.base import ToolContext
    from m3agent.tools.extra_toolset import ExtendedToolset
    from m3agent.tools.sandbox.policy import SandboxPolicy
    from m3agent.tools.sandbox.runner import Sandbox
    from m3agent.tools.toolset import background_jobs, default_toolset

    old = ExtendedToolset(default_toolset(), [])
    ctx = ToolContext(cwd=tmp_path, sandbox=Sandbox(SandboxPolicy(workspace=tmp_path)))
    old.dispatch("shell", {"command": "sleep 60", "run_in_background": True}, ctx)
    (job,) = background_jobs(old).jobs()
    _close(old)
    assert job.running
    old.close()  # the session's end
    assert not job.running and job.status() == "stopped"
