"""/rewind and Esc-Esc (issue 22): pick an earlier prompt; the conversation goes back to before
it (a rewind record appended to the session log, which keeps everything) and the files too,
from the checkpoints /undo uses, shell changes included. Pilot over the real factory (real
Session, sandbox, checkpoints) and the ScriptedEngine emitting real M3 tool-call markup."""

from __future__ import annotations

import json

import pytest
from m3agent.app.tui.screens.rewind_screen import RewindScreen
from m3agent.app.tui.widgets.notice_view import NoticeView
from m3agent.app.tui.widgets.prompt_input import PromptInput
from m3agent.app.tui.widgets.user_message import UserMessage
from pilot_steps import ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (110, 34)


def _shell_call(m3text, command: str) -> str:
    return m3text.shell_call(command, preface="Running it.\n")


def _app(harness, replies, resume=None):
    return harness.factory_app(replies, resume=resume), harness.engine


def _script(m3text):
    return [
        m3text.edit_call("src/calc.py", "a - b", "a + b"),  # turn 1: an edit
        "</mm:think>fixed the sign",
        _shell_call(m3text, "echo made by shell > shell.txt && echo gone > README.md"),  # turn 2
        "</mm:think>ran it",
        "</mm:think>just talk",  # turn 3: no change
    ]


def _users(main):
    return [str(u.render()) for u in main.query(UserMessage)]


async def _three_turns(pilot, until, main):
    for n, text in enumerate(["fix the sign", "make a file", "say hi"], 1):
        await send(pilot, text)
        await turn_done(pilot, until, n)


async def test_rewind_restores_conversation_and_files_and_the_log_keeps_all(
    harness, until, m3home, m3text
):
    repo = harness.repo
    app, engine = _app(harness, _script(m3text))
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await _three_turns(pilot, until, main)
        assert "a + b" in (repo / "src/calc.py").read_text()
        assert (repo / "shell.txt").exists() and (repo / "README.md").read_text() == "gone\n"
        session = main.controller.session
        log = session.conversation.path
        lines_before = log.read_text().splitlines()
        await send(pilot, "/rewind")
        await until(pilot, lambda: isinstance(app.screen, RewindScreen))
        listed = [str(o.prompt) for o in app.screen.query_one("OptionList")._options]
        assert listed == ["3. say hi", "2. make a file", "1. fix the sign"]  # newest first
        await pilot.press("down", "enter")  # prompt 2
        await pilot.pause(0.05)
        await pilot.press("enter")  # the first action: conversation and files
        await until(pilot, lambda: not isinstance(app.screen, RewindScreen))
        await until(pilot, lambda: "rewound to before prompt 2" in _last_notice(main))
        # The files as they were before prompt 2: turn 1's edit stays, the shell's undone.
        assert "a + b" in (repo / "src/calc.py").read_text()
        assert not (repo / "shell.txt").exists()
        assert (repo / "README.md").read_text() == "# demo\n"
        assert _users(main) == ["fix the sign"]
        assert main.query_one(PromptInput).text == "make a file"  # back in the prompt
        # The log was appended to, never cut.
        lines_after = log.read_text().splitlines()
        assert lines_after[: len(lines_before)] == lines_before
        records = [json.loads(x) for x in lines_after[len(lines_before) :]]
        assert records[0]["kind"] == "rewind"
        # The next prompt goes on from turn 1.
        main.query_one(PromptInput).load_text("")
        await send(pilot, "again")
        await turn_done(pilot, until, 4)
        sent = [m.content for m in engine.requests[-1].messages if m.role == "user"]
        assert sent == ["fix the sign", "again"]
        sid = session.id
    # Resumed later: the rewound history, not the dropped turns.
    app2, _ = _app(harness, [], resume=sid)
    async with app2.run_test(size=SIZE) as pilot:
        main2 = await ready(pilot, until)
        await until(pilot, lambda: len(_users(main2)) == 2)
        assert _users(main2) == ["fix the sign", "again"]


def _last_notice(main) -> str:
    views = main.query(NoticeView)
    return str(views.last().render()) if views else ""


async def test_conversation_only_leaves_the_files(harness, until, m3home, m3text):
    app, _ = _app(harness, _script(m3text))
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await _three_turns(pilot, until, main)
        await send(pilot, "/rewind")
        await until(pilot, lambda: isinstance(app.screen, RewindScreen))
        await pilot.press("down", "down", "enter")  # prompt 1
        await pilot.pause(0.05)
        await pilot.press("down", "enter")  # conversation only
        await until(pilot, lambda: "rewound to before prompt 1" in _last_notice(main))
        assert _users(main) == []
        assert (harness.repo / "shell.txt").exists()
        assert "a + b" in (harness.repo / "src/calc.py").read_text()


async def test_escape_twice_when_idle_opens_the_picker(harness, until, m3home, m3text):
    app, _ = _app(harness, _script(m3text)[:2])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "fix the sign")
        await turn_done(pilot, until)
        await pilot.press("escape")
        await pilot.pause(0.8)  # too slow: no double press
        await pilot.press("escape")
        await pilot.pause(0.05)
        assert not isinstance(app.screen, RewindScreen)
        await pilot.press("escape")  # the second of a quick pair
        await until(pilot, lambda: isinstance(app.screen, RewindScreen))
        await pilot.press("escape")  # Esc closes it; nothing changed
        await until(pilot, lambda: not isinstance(app.screen, RewindScreen))
        assert _users(main) == ["fix the sign"]
        assert "a + b" in (harness.repo / "src/calc.py").read_text()


def test_tmux_escape_escape_rewinds_a_shell_change(repo, m3home, m3text, tmp_path):
    """The real program in tmux: a shell command writes a file; Esc Esc (two key presses, as
    a person types them) opens the picker, Enter twice rewinds, the file is gone."""
    import shutil
    import subprocess
    import time

    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    from tmux_driver import Tmux, scripted_command

    script = tmp_path / "script.json"
    script.write_text(
        json.dumps([_shell_call(m3text, "echo hi > made.txt"), "</mm:think>made the file"])
    )
    with Tmux() as tmux:
        tmux.start(scripted_command(repo, script, m3home, approval="never"))
        tmux.wait_for("Ask m3agent")
        tmux.wait_for("repository snapshot taken")
        tmux.type("make the file")
        tmux.press("Enter")
        tmux.wait_for("made the file")
        assert (repo / "made.txt").read_text() == "hi\n"
        tmux.press("Escape")
        time.sleep(0.15)
        tmux.press("Escape")
        tmux.wait_for("Rewind to before a prompt")
        assert "1. make the file" in tmux.screen()
        tmux.press("Enter")
        tmux.wait_for("Restore the conversation and the files")
        tmux.press("Enter")
        tmux.wait_for("rewound to before prompt 1")
        assert not (repo / "made.txt").exists()
        assert "made the file" not in tmux.joined_screen()
        tmux.quit()
    assert (
        subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True
        ).stdout
        == ""
    )


async def test_files_only_keeps_the_conversation(harness, until, m3home, m3text):
    app, _ = _app(harness, _script(m3text))
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await _three_turns(pilot, until, main)
        log = main.controller.session.conversation.path
        before = log.read_text()
        await send(pilot, "/rewind")
        await until(pilot, lambda: isinstance(app.screen, RewindScreen))
        await pilot.press("down", "down", "enter")  # prompt 1
        await pilot.pause(0.05)
        await pilot.press("down", "down", "enter")  # files only
        await until(pilot, lambda: "the conversation is unchanged" in _last_notice(main))
        assert _users(main) == ["fix the sign", "make a file", "say hi"]
        assert "a - b" in (harness.repo / "src/calc.py").read_text()  # before turn 1's edit
        assert not (harness.repo / "shell.txt").exists()
        assert '"kind": "rewind"' not in log.read_text()[len(before) :]
