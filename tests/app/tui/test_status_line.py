"""The scriptable status line (Claude Code's `statusLine`): a real shell command fed the
session's figures as JSON on stdin, its first line shown in the status bar, run only when the
figures change; a failing command is reported once and the built-in line comes back. Which
command runs: the user's settings.json, config.toml, a project's only once trusted."""

from __future__ import annotations

import json

import pytest
from m3agent.app.hooks_settings import trust_hooks
from m3agent.app.settings import load_settings
from m3agent.app.status_line import TRUST_TABLE, StatusLineCommand, load_status_line
from m3agent.app.tui.widgets.error_view import ErrorView
from m3agent.app.tui.widgets.status_bar import StatusBar
from pilot_steps import ready, send, turn_done

from ...support.cli import CONSOLE_SCRIPT, run_cli


@pytest.mark.anyio
async def test_command_fed_json_and_shown(harness, until, tmp_path):
    seen = tmp_path / "in.json"
    command = (
        f"if [ -f {tmp_path}/fail ]; then echo boom >&2; exit 3; fi; cat > {seen}.new; mv {seen}.new {seen}; "
        f'echo "my line $(wc -c < {seen})"; echo second line'
    )
    status_line = StatusLineCommand(command, "test", padding=1)
    app = harness.app(["</mm:think>hello"], approval="never", status_line=status_line)
    async with app.run_test(size=(110, 30)) as pilot:
        main = await ready(pilot, until)
        bar = main.query_one(StatusBar)
        await until(pilot, lambda: (bar.custom or "").startswith(" my line"))
        await send(pilot, "hi")
        await turn_done(pilot, until)
        await until(pilot, lambda: json.loads(seen.read_text())["state"] == "ready")
        fed = json.loads(seen.read_text())
        assert fed["session_id"] == main.controller.session.id
        assert fed["transcript_path"].endswith(f"{fed['session_id']}.jsonl")
        assert fed["cwd"] == str(harness.repo) and fed["model"]["id"] == "scripted"
        assert fed["tokens"]["model_calls"] == 1 and fed["tokens"]["prompt"] > 0
        cache = fed["prompt_cache"]
        assert cache["miss_reason"] == "first request" and cache["cached_tokens"] == 0
        assert fed["cost"]["total_cost_usd"] is None and fed["thinking"] == "adaptive"
        assert str(bar.render()).startswith(" my line")  # the first line only
        # nothing changed: nothing runs again
        await until(pilot, lambda: not main.status_line.busy)
        runs = main.status_line.runs
        await pilot.pause(0.5)
        assert main.status_line.runs == runs

        (tmp_path / "fail").touch()
        await pilot.press("shift+tab")  # a mode change: new figures, the command fails
        await until(pilot, lambda: bool(main.query(ErrorView)))
        error = str(main.query(ErrorView).last().render())
        assert "status line command failed (boom)" in error
        assert bar.custom is None and "think adaptive" in str(bar.render())  # built-in again


def test_which_command_runs_and_project_trust(tmp_path, home):
    project = tmp_path / "proj"
    (project / ".m3agent").mkdir(parents=True)
    home.mkdir()
    assert load_status_line(load_settings(), project) == (None, None)
    (home / "config.toml").write_text('[status_line]\ntype = "command"\ncommand = "echo toml"\n')
    assert load_status_line(load_settings(), project)[0].command == "echo toml"
    (home / "settings.json").write_text(json.dumps({"statusLine": {"command": "echo user"}}))
    assert load_status_line(load_settings(), project)[0].command == "echo user"

    raw = {"type": "command", "command": "echo project"}
    (project / ".m3agent" / "settings.json").write_text(json.dumps({"statusLine": raw}))
    chosen, note = load_status_line(load_settings(), project)
    assert chosen.command == "echo user"  # the project's is not trusted yet: not run
    assert "not trusted" in note and "echo project" in note and "m3agent hooks trust" in note
    r = run_cli(home, "hooks", "trust", "--yes", "--cwd", str(project), command=CONSOLE_SCRIPT)
    assert r.returncode == 0, r.stderr
    assert "statusLine: echo project" in r.stdout
    chosen, note = load_status_line(load_settings(), project)
    assert (chosen.command, chosen.source, note) == (
        "echo project",
        str(project / ".m3agent" / "settings.json"),
        None,
    )  # the project's, trusted: it runs in the sandbox, under the session's policy
    assert chosen.policy is not None and chosen.policy.workspace == project.resolve()
    assert chosen.policy.mode == "read-only"  # a display changes nothing
    raw["command"] = "echo changed"  # any change needs trust again
    (project / ".m3agent" / "settings.json").write_text(json.dumps({"statusLine": raw}))
    assert load_status_line(load_settings(), project)[0].command == "echo user"
    assert load_status_line(load_settings(), project)[0].policy is None  # the user's: host
    trust_hooks(home, project, raw, TRUST_TABLE)
    assert load_status_line(load_settings(), project)[0].command == "echo changed"

    (home / "settings.json").write_text(json.dumps({"statusLine": {"command": 3}}))
    (project / ".m3agent" / "settings.json").unlink()
    with pytest.raises(ValueError, match="statusLine needs a command"):
        load_status_line(load_settings(), project)


def test_project_status_line_runs_in_the_sandbox(world):
    """A project's command (its StatusLineCommand carries the session's policy, read-only)
    runs in the tool sandbox: it is fed its JSON on stdin there, and neither the home's key
    nor a write to the workspace is there. Control: the same command as the user's own (no
    policy) prints the key and writes."""
    import asyncio

    from m3agent.app.tui.status_line import StatusLineRunner
    from m3agent.tools.sandbox.policy import SandboxPolicy
    from sandbox_support import SECRET

    key = world.home / ".ssh" / "id_rsa"
    fed = "${TMPDIR:-$PWD}/fed.json"  # the sandbox's TMPDIR: the one place it may write
    command = f"cat > {fed}; echo > wrote.txt; cat {key} || cat {fed}"

    def shown(policy: SandboxPolicy | None) -> list[str | None]:
        lines: list[str | None] = []

        async def go() -> None:
            cmd = StatusLineCommand(command, "project", policy=policy)
            runner = StatusLineRunner(cmd, world.ws, lines.append, lines.append)
            runner.feed({"state": "ready"})
            while runner.busy:
                await asyncio.sleep(0.01)

        asyncio.run(go())
        return lines

    policy = SandboxPolicy(workspace=world.ws, home=world.home, mode="read-only")
    assert shown(policy) == ['{"state": "ready"}']
    assert not (world.ws / "wrote.txt").exists()
    assert shown(None) == [SECRET]
    assert (world.ws / "wrote.txt").exists()
