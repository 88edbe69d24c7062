"""Pilot tests of control: interrupts, undo, the sessions browser, queued prompts (a real
Session and the real ScriptedEngine)."""

from __future__ import annotations

import time

import pytest
from m3agent.app.tui.widgets.error_view import ErrorView
from m3agent.app.tui.widgets.notice_view import NoticeView
from m3agent.app.tui.widgets.prompt_input import PromptInput
from m3agent.app.tui.widgets.tool_card import ToolCard
from m3agent.app.tui.widgets.user_message import UserMessage
from pilot_steps import at_approval, ready, saved_session, send, turn_done

SIZE = (100, 40)
pytestmark = pytest.mark.anyio


async def test_sessions_browser_resumes_the_chosen_session(harness, until):
    from m3agent.app.tui.launch import list_sessions
    from m3agent.app.tui.screens.sessions_screen import SessionsScreen

    old_id = await saved_session(harness.app(["First answer."]), until, "remember this", SIZE)
    app2 = harness.app(
        ["Second answer."], list_sessions=lambda: list_sessions(harness.home / "sessions")
    )
    async with app2.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        new_id = main.controller.session.id
        await send(pilot, "/sessions")
        await until(pilot, lambda: isinstance(app2.screen, SessionsScreen))
        listed = [s.session_id for s in app2.screen.sessions]
        assert old_id in listed
        option_list = app2.screen.query_one("#sessions-list")
        option_list.focus()
        option_list.highlighted = listed.index(old_id)
        await pilot.press("enter")
        await until(
            pilot,
            lambda: (
                main.controller.session is not None
                and main.controller.session.id == old_id
                and main.status.state == "ready"
            ),
        )
        await pilot.pause(0.1)
        assert new_id != old_id
        assert [str(u.render()) for u in main.query(UserMessage)] == ["remember this"]
        await send(pilot, "and now?")
        await turn_done(pilot, until)
        contents = [m.content for m in harness.engine.requests[0].messages if m.role == "user"]
        assert contents == ["remember this", "and now?"]


async def test_approve_for_session_stops_asking_for_that_tool(harness, until, m3text):
    script = [
        m3text.edit_call("src/calc.py", "a - b", "a + b"),
        m3text.edit_call("README.md", "# demo", "# calc demo"),
        "Both done.",
    ]
    app = harness.app(script, approval="untrusted")
    async with at_approval(app, until, "fix both", SIZE) as (pilot, main):
        await pilot.press("a")
        await turn_done(pilot, until)
        assert [c.status for c in main.query(ToolCard)] == ["ok", "ok"]
        assert (harness.repo / "README.md").read_text() == "# calc demo\n"
        assert "return a + b" in (harness.repo / "src/calc.py").read_text()


async def test_context_command_shows_the_snapshot_figures(harness, until):
    from m3agent.agent import events as ev
    from m3agent.app.tui.messages import SessionEvent

    app = harness.app([])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        # The session reports its snapshot as a ContextEvent; /context shows those figures.
        main.post_message(
            SessionEvent(ev.ContextEvent("snapshot", {"tokens": 321, "files_included": 2}))
        )
        await pilot.pause(0.05)
        await send(pilot, "/context")
        await pilot.pause(0.05)
        notices = [str(n.render()) for n in main.query(NoticeView)]
        assert any("repository snapshot taken: 2 files, 321 tokens" in n for n in notices)
        assert notices[-1].startswith("repository snapshot: 321 tokens")  # words, not keys


async def test_escape_stops_a_running_tool(harness, until, m3text):
    """Built through app/factory (the CLI's seam): the shell runs under the real sandbox."""
    app = harness.factory_app([m3text.shell_call("sleep 30"), "stopped"])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "wait a bit")
        await until(pilot, lambda: bool(main.query(ToolCard)))
        await pilot.pause(0.5)  # the command is running
        started = time.monotonic()
        await pilot.press("escape")
        await turn_done(pilot, until)
        assert time.monotonic() - started < 10
        assert main.query_one(ToolCard).status == "interrupted"
        assert any("interrupted" in str(n.render()) for n in main.query(NoticeView))


async def test_interrupt_while_asking_closes_the_question(harness, until, m3text):
    app = harness.app([m3text.edit_call("src/calc.py", "a - b", "a + b")], approval="untrusted")
    async with at_approval(app, until, "fix add", SIZE) as (pilot, main):
        await main.action_interrupt()  # as a time limit would end the turn
        await until(pilot, lambda: main.controller.completed_turns >= 1)
        await until(pilot, lambda: app.screen is main)
        assert main.query_one(ToolCard).status == "interrupted"
        assert (harness.repo / "src/calc.py").read_text().endswith("a - b\n")
        assert not [e for e in main.query(ErrorView)]  # no "no pending approval" noise


async def test_undo_restores_the_files_changed_by_the_last_turn(harness, until, m3text):
    """Through app/factory: the session snapshots before the edit; /undo restores it."""
    calc = harness.repo / "src/calc.py"
    app = harness.factory_app([m3text.edit_call("src/calc.py", "a - b", "a + b"), "Fixed."])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "fix add")
        await turn_done(pilot, until)
        assert calc.read_text().endswith("a + b\n")
        await send(pilot, "/undo")
        await until(pilot, lambda: calc.read_text().endswith("a - b\n"))
        await pilot.pause(0.05)
        assert "restored" in str(main.query(NoticeView).last().render())
        await send(pilot, "/undo")  # nothing left to undo: said so, nothing breaks
        await until(pilot, lambda: bool(main.query(ErrorView)))
        assert "undo failed" in str(main.query(ErrorView).last().render())


async def test_prompt_history_survives_a_restart(harness, until):
    app = harness.app(["ok"])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, until)
        await send(pilot, "first run prompt\nwith two lines")
        await turn_done(pilot, until)
    app2 = harness.app([])
    async with app2.run_test(size=SIZE) as pilot:
        await ready(pilot, until)
        prompt = app2.main.query_one(PromptInput)
        prompt.focus()
        await pilot.press("up")
        assert prompt.text == "first run prompt\nwith two lines"


async def test_long_tool_output_opens_on_click(harness, until, m3text):
    from m3agent.app.tui.widgets.output_view import OutputView

    (harness.repo / "long.txt").write_text("".join(f"line {i}\n" for i in range(40)))
    app = harness.app([m3text.read_call("long.txt"), "Read it."])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "read long.txt")
        await turn_done(pilot, until)
        out = main.query_one(OutputView)
        assert out.hidden_lines > 0 and "more lines" in str(out.render())
        await pilot.click(OutputView)
        assert out.hidden_lines == 0 and "line 39" in str(out.render())


async def test_ctrl_c_interrupts_then_clears_then_quits_twice(harness, until):
    app = harness.app(["word " * 400, "short"], pause_after=20)
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "talk")
        await until(pilot, lambda: harness.engine.paused.is_set())
        await pilot.press("ctrl+c")  # busy: interrupts
        await turn_done(pilot, until)
        assert any("interrupted" in str(n.render()) for n in main.query(NoticeView))
        prompt = main.query_one(PromptInput)
        prompt.load_text("drop me")
        await pilot.press("ctrl+c")  # idle with text: clears it, nothing else
        assert prompt.text == "" and app.is_running
        await pilot.press("ctrl+c")  # idle, empty: a hint, not a toast, and no quit yet
        await pilot.pause(0.05)
        assert "ctrl+c again to quit" in str(main.query_one("#activity").render())
        assert not app.screen.query("Toast") and app.is_running
        assert app.resume_hint is None
        await pilot.press("ctrl+c")  # twice: quits, with the command that resumes
        await until(pilot, lambda: app.resume_hint is not None)
        assert app.resume_hint == f"m3agent resume {main.controller.session.id}"


async def test_prompt_sent_while_busy_waits_and_keeps_the_order(harness, until):
    app = harness.app(["word " * 200, "Second answer."], pause_after=5)
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "first")
        await until(pilot, lambda: harness.engine.paused.is_set())  # mid-answer, held
        await send(pilot, "second")
        assert main.query_one("#waiting").display
        assert [str(u.render()) for u in main.query(UserMessage)] == ["first"]
        harness.engine.pause_after = None  # the second request must not pause
        harness.engine.resume()
        await turn_done(pilot, until, 2)
        kinds = [
            type(w).__name__
            for w in main.query_one("#conversation").children
            if type(w).__name__ in ("UserMessage", "AnswerView")
        ]
        assert kinds == ["UserMessage", "AnswerView", "UserMessage", "AnswerView"]
        assert not main.query_one("#waiting").display
        assert [r.messages[-1].content for r in harness.engine.requests] == ["first", "second"]
