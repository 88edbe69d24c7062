"""The everyday commands: /clear and /new open a new session (the old log stays, resumable),
/status, /cost and /usage, /exit, /init, /permissions, and `!cmd` (run under the real sandbox,
its output sent to the model with the next prompt). Pilot over the real factory."""

from __future__ import annotations

import pytest
from m3agent.app.tui.widgets.error_view import ErrorView
from m3agent.app.tui.widgets.user_message import UserMessage
from pilot_steps import notice_after, ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (110, 34)


def _app(harness, replies, approval="never"):
    # one engine for every session, as launch
    return harness.factory_app(replies, approval=approval), harness.engine


async def test_clear_and_new_start_a_new_session(harness, until, m3home):
    app, engine = _app(harness, ["</mm:think>one", "</mm:think>two"])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "first")
        await turn_done(pilot, until)
        first = main.controller.session.id
        await send(pilot, "/clear")
        await until(
            pilot,
            lambda: main.controller.session is not None and main.controller.session.id != first,
        )
        await ready(pilot, until)
        assert not main.query(UserMessage)  # an empty conversation on screen
        await send(pilot, "second")
        await turn_done(pilot, until)
        # The new session's prompt does not carry the old conversation.
        texts = [m.content for m in engine.requests[-1].messages if m.role == "user"]
        assert texts == ["second"]
        second = main.controller.session.id
        await send(pilot, "/new")
        await until(
            pilot,
            lambda: main.controller.session is not None and main.controller.session.id != second,
        )
    logs = {p.stem for p in (m3home / "sessions").glob("*.jsonl")}
    assert {first, second} <= logs  # both kept: resumable


async def test_status_cost_usage_permissions(harness, until, m3home):
    app, _ = _app(harness, ["</mm:think>one"])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        status = await notice_after(pilot, until, "/status")
        assert f"session    {main.controller.session.id}" in status
        assert f"workspace  {harness.repo}" in status and "approval   never" in status
        await send(pilot, "hello")
        await turn_done(pilot, until)
        cost = await notice_after(pilot, until, "/cost")
        assert cost.startswith("this session: 1 prompts, 1 model calls")
        assert "prompt tokens: " in cost and "generated tokens: " in cost
        assert await notice_after(pilot, until, "/usage") == cost
        perms = await notice_after(pilot, until, "/permissions")
        assert perms.startswith("approval policy: never")
        assert "shell prefixes for this session: none" in perms


async def test_init_asks_the_model_for_agents_md(harness, until, m3home):
    app, engine = _app(harness, ["</mm:think>written"])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, until)
        await send(pilot, "/init")
        await turn_done(pilot, until)
    prompt = [m.content for m in engine.requests[-1].messages if m.role == "user"][-1]
    assert prompt.startswith("Write an AGENTS.md at the repository root")
    assert "Create the file with write_file." in prompt


async def test_exit_leaves(harness, until, m3home):
    app, _ = _app(harness, [])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, until)
        await send(pilot, "/exit")
        await until(pilot, lambda: not app.is_running)


async def test_bang_runs_in_the_sandbox_and_goes_with_the_next_prompt(harness, until, m3home):
    (harness.repo / "marker.txt").write_text("hello from the workspace\n")
    app, engine = _app(harness, ["</mm:think>seen"])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        shown = await notice_after(pilot, until, "!cat marker.txt; echo done > made.txt")
        assert "$ cat marker.txt" in shown and "hello from the workspace" in shown
        assert not engine.requests  # no model call for a `!` command
        await send(pilot, "what did it print?")
        await turn_done(pilot, until)
        await send(pilot, "!")
        await until(pilot, lambda: bool(main.query(ErrorView)))
    prompt = [m.content for m in engine.requests[-1].messages if m.role == "user"][-1]
    assert prompt.startswith("<shell_command>\n$ cat marker.txt")
    assert "hello from the workspace" in prompt and prompt.endswith("what did it print?")
    assert (harness.repo / "made.txt").read_text() == "done\n"  # workspace-write: allowed


async def test_bang_is_confined_like_the_shell_tool(harness, until, m3home, tmp_path):
    outside = tmp_path / "outside.txt"
    app, _ = _app(harness, [])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, until)
        shown = await notice_after(pilot, until, f"!echo x > {outside}")
    assert not outside.exists(), shown  # outside the workspace: the sandbox refused


async def test_parent_instructions_reach_the_model_and_memory_lists_them(
    make_repo, tmp_path, until, m3home, monkeypatch, harness
):
    from m3agent.app.factory import build_session
    from m3agent.app.settings import load_settings
    from m3agent.app.tui.app import create_app
    from m3agent.engine.backends.scripted import ScriptedEngine

    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    monkeypatch.delenv("EDITOR", raising=False)
    monkeypatch.delenv("VISUAL", raising=False)
    (tmp_path / "userhome" / ".m3agent").mkdir(parents=True)
    (tmp_path / "userhome" / ".m3agent" / "AGENTS.md").write_text("User rule: be brief.\n")
    parent = tmp_path / "mono"
    parent.mkdir()
    (parent / "AGENTS.md").write_text("Monorepo rule: run make check.\n")
    ws = parent / "pkg"
    ws.mkdir()
    (ws / "AGENTS.md").write_text("Package rule.\n")
    (ws / "a.py").write_text("x = 1\n")
    settings = load_settings().override(engine="scripted", approval="never")
    engine = harness.wrap(ScriptedEngine(["</mm:think>ok"]))

    def factory(resume_id, progress):
        return build_session(settings, cwd=ws, engine=engine, resume=resume_id)

    from dataclasses import replace

    app = create_app(factory, replace(harness.config(), cwd=ws))
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "hi")
        await turn_done(pilot, until)
        system = [m.content for m in main.controller.session.messages if m.role == "system"]
        memory = await notice_after(pilot, until, "/memory")
        await send(pilot, "/memory edit")
        await until(pilot, lambda: bool(main.query(ErrorView)))
        no_editor = str(main.query(ErrorView).last().render())
    # The session's system messages (the request folds them into the one system block).
    sent = engine.requests[0].messages[0].content
    assert "User rule: be brief." in sent and "Monorepo rule" in sent
    assert "<repository_snapshot>" in system[1] and "Package rule." in system[1]
    assert "User rule: be brief." in system[2] and "Monorepo rule: run make check." in system[2]
    assert system[2].index("User rule") < system[2].index("Monorepo rule")
    assert f"workspace: {ws / 'AGENTS.md'} (in the repository snapshot)" in memory
    assert f"user: {tmp_path / 'userhome/.m3agent/AGENTS.md'}" in memory
    assert f"parent: {parent / 'AGENTS.md'}" in memory
    assert "set $EDITOR to edit" in no_editor


async def test_no_context_reads_no_instruction_file_not_even_for_memory(
    harness, until, m3home, tmp_path, monkeypatch
):
    """--no-context (issue 36): the session opens without instruction files, and /memory
    lists none instead of reading them (the test above is the control: on, it lists them)."""
    from dataclasses import replace

    from m3agent.app.factory import build_session
    from m3agent.app.settings import load_settings
    from m3agent.app.tui.app import create_app
    from m3agent.engine.backends.scripted import ScriptedEngine

    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    (tmp_path / "userhome" / ".m3agent").mkdir(parents=True)
    (tmp_path / "userhome" / ".m3agent" / "AGENTS.md").write_text("User rule: be brief.\n")
    settings = load_settings().override(engine="scripted", approval="never", context=False)
    engine = harness.wrap(ScriptedEngine(["</mm:think>ok"]))

    def factory(resume_id, progress):
        return build_session(settings, cwd=harness.repo, engine=engine, resume=resume_id)

    app = create_app(factory, replace(harness.config(), instructions=False))
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        memory = await notice_after(pilot, until, "/memory")
        system = [m.content for m in main.controller.session.messages if m.role == "system"]
    assert memory == "instruction files: none read (--no-context)"
    assert not any("User rule" in s for s in system)


def test_memory_edit_never_opens_a_committed_agents_md_link(tmp_path):
    """Issue 36, round 5: `/memory edit` touched ./AGENTS.md and handed it to $EDITOR; a clone
    that commits AGENTS.md as a (dangling) symlink had the file it names created outside the
    workspace, and the editor opened there. Refused, one line. The user's own
    ~/.m3agent/AGENTS.md may be a link (a dotfiles manager's). Control: the touch the
    command did before creates the file outside."""
    from m3agent.app.tui.slash_daily import ready_for_editor

    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "AGENTS.md").symlink_to(outside / "planted.desktop")
    with pytest.raises(ValueError, match=r"AGENTS.md is a symlink \(to .*planted.desktop\)"):
        ready_for_editor(ws / "AGENTS.md", repository=True)
    assert list(outside.iterdir()) == []
    mine = tmp_path / "dotfiles" / "AGENTS.md"
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "AGENTS.md").symlink_to(mine)
    mine.parent.mkdir()
    ready_for_editor(tmp_path / "home" / "AGENTS.md", repository=False)
    assert mine.exists()
    (ws / "AGENTS.md").touch()  # control
    assert (outside / "planted.desktop").exists()
