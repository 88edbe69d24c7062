"""Pilot tests: the TUI over a real Session and the real ScriptedEngine."""

from __future__ import annotations

import time

import pytest
from m3agent.app.tui.screens.approval_screen import ApprovalScreen
from m3agent.app.tui.widgets.answer_view import AnswerView
from m3agent.app.tui.widgets.diff_view import DiffView
from m3agent.app.tui.widgets.error_view import ErrorView
from m3agent.app.tui.widgets.notice_view import NoticeView
from m3agent.app.tui.widgets.prompt_input import PromptInput
from m3agent.app.tui.widgets.reasoning_view import ReasoningView
from m3agent.app.tui.widgets.tool_card import ToolCard
from m3agent.app.tui.widgets.user_message import UserMessage
from PIL import Image

SIZE = (100, 40)
pytestmark = pytest.mark.anyio


async def ready(pilot, until):
    main = pilot.app.main
    await until(pilot, lambda: main.session is not None and main.status.state == "ready")
    return main


async def send(pilot, text: str) -> None:
    prompt = pilot.app.main.query_one(PromptInput)
    prompt.focus()
    prompt.load_text(text)
    await pilot.press("enter")


async def turn_done(pilot, until, n: int = 1) -> None:
    await until(pilot, lambda: pilot.app.main.completed_turns >= n)
    await pilot.pause(0.05)


async def test_prompt_streams_markdown_answer_and_folds_reasoning(harness, until):
    script = ["<mm:think>The user greets me.</mm:think>Hello **there**!\n\n- one\n- two"]
    app = harness.app(script)
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "hi")
        await turn_done(pilot, until)
        users = list(main.query(UserMessage))
        assert len(users) == 1
        answer = main.query_one(AnswerView)
        assert answer.text == "Hello **there**!\n\n- one\n- two"
        reasoning = main.query_one(ReasoningView)
        assert reasoning.text == "The user greets me."
        assert reasoning.collapsed  # folded once the answer started
        req = harness.engine.requests[0]
        assert req.messages[-1].role == "user" and req.messages[-1].content == "hi"
        # The status bar shows the request's real token figures.
        assert main.status.context_used and main.status.context_used > 0
        assert "think adaptive" in main.status.render()


async def test_approve_edit_applies_it_and_shows_the_diff(harness, until, m3text):
    script = [m3text.edit_call("src/calc.py", "a - b", "a + b"), "Fixed."]
    app = harness.app(script, approval="untrusted")
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "fix add")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        assert "a + b" in str(app.screen.query_one("#approval-args").render())
        await pilot.press("y")
        await turn_done(pilot, until)
        assert (harness.repo / "src/calc.py").read_text() == "def add(a, b):\n    return a + b\n"
        card = main.query_one(ToolCard)
        assert card.status == "ok"
        assert card.query(DiffView) or "a + b" in str(card.query("Static").last().render())
        assert main.query(AnswerView).last().text == "Fixed."
        assert len(harness.engine.requests) == 2


async def test_deny_with_note_reaches_the_model_and_leaves_the_file(harness, until, m3text):
    script = [m3text.edit_call("src/calc.py", "a - b", "a + b"), "Understood, I left it."]
    app = harness.app(script, approval="untrusted")
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "fix add")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("n")  # opens the note field
        await pilot.press(*"keep the bug")
        await pilot.press("enter")
        await turn_done(pilot, until)
        assert (harness.repo / "src/calc.py").read_text() == "def add(a, b):\n    return a - b\n"
        card = main.query_one(ToolCard)
        assert card.status == "denied"
        second = harness.engine.requests[1]
        tool_msgs = [m for m in second.messages if m.role == "tool"]
        assert tool_msgs and "keep the bug" in tool_msgs[-1].content


async def test_escape_interrupts_a_streaming_answer(harness, until):
    long_answer = "word " * 400
    app = harness.app([long_answer], pause_after=20)  # held mid-answer until interrupted
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "talk")
        await until(pilot, lambda: harness.engine.paused.is_set() and bool(main.query(AnswerView)))
        await pilot.press("escape")
        await turn_done(pilot, until)
        notices = [str(n.render()) for n in main.query(NoticeView)]
        assert any("interrupted" in n for n in notices)
        assert len(main.query_one(AnswerView).text) < len(long_answer)
        assert not main.busy
        assert main.status.state == "ready"


async def test_thinking_toggle_changes_the_next_request(harness, until):
    app = harness.app(["one", "two", "three"])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "first")
        await turn_done(pilot, until, 1)
        await pilot.press("ctrl+t")  # adaptive -> enabled, for the next turn
        assert "think enabled" in main.status.render()
        assert len(harness.engine.requests) == 1  # nothing re-sent by the toggle
        await send(pilot, "second")
        await turn_done(pilot, until, 2)
        await send(pilot, "/think disabled")
        await send(pilot, "third")
        await turn_done(pilot, until, 3)
        modes = [r.thinking_mode for r in harness.engine.requests]
        assert modes == ["adaptive", "enabled", "disabled"]


async def test_attach_image_by_command_and_by_at_path(harness, until):
    Image.new("RGB", (8, 8), "red").save(harness.repo / "shot.png")
    Image.new("RGB", (8, 8), "blue").save(harness.repo / "other.png")
    app = harness.app(["I see red.", "I see blue."])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "/attach shot.png")
        await send(pilot, "what colour?")
        await turn_done(pilot, until, 1)
        await send(pilot, "and @other.png?")
        await turn_done(pilot, until, 2)
        await send(pilot, "/attach missing.png")
        await pilot.pause(0.05)
        first, second = harness.engine.requests
        assert [m.path for m in first.messages[-1].media] == [str((harness.repo / "shot.png").resolve())]
        assert [m.path for m in second.messages[-1].media] == [str((harness.repo / "other.png").resolve())]
        assert main.query(ErrorView)  # the missing file is reported, not sent


async def test_resume_shows_history_and_continues_the_conversation(harness, until):
    app = harness.app(["<mm:think>Recall.</mm:think>The answer is 42."])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "what is the answer?")
        await turn_done(pilot, until)
        session_id = main.session.id
    app2 = harness.app(["Still 42."], resume=session_id)
    async with app2.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await pilot.pause(0.1)
        assert [str(u.render()) for u in main.query(UserMessage)] == ["what is the answer?"]
        assert main.query(AnswerView).first().text == "The answer is 42."
        await send(pilot, "sure?")
        await turn_done(pilot, until)
        req = harness.engine.requests[0]
        contents = [m.content for m in req.messages if m.role in ("user", "assistant")]
        assert contents == ["what is the answer?", "The answer is 42.", "sure?"]


async def test_prompt_history_and_at_path_completion(harness, until):
    app = harness.app(["ok", "ok"])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, until)
        await send(pilot, "look at it")
        await turn_done(pilot, until)
        prompt = app.main.query_one(PromptInput)
        prompt.focus()
        await pilot.press("up")
        assert prompt.text == "look at it"
        await pilot.press("down")
        assert prompt.text == ""
        await pilot.press(*"read @sr")
        await pilot.press("tab")
        await pilot.press(*"ca")
        await pilot.press("tab")
        assert prompt.text == "read @src/calc.py"
        await pilot.press("ctrl+j")
        await pilot.press(*"x")
        assert prompt.text == "read @src/calc.py\nx"


async def test_slash_commands_help_diff_unknown_and_context(harness, until):
    (harness.repo / "README.md").write_text("# demo\nchanged\n")
    app = harness.app([])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "/help")
        await send(pilot, "/diff")
        await send(pilot, "/nope")
        await send(pilot, "/context")
        await pilot.pause(0.1)
        notices = "\n".join(str(n.render()) for n in main.query(NoticeView))
        assert "/think enabled|disabled|adaptive" in notices and "ctrl+t" in notices
        assert "+changed" in str(main.query_one(DiffView).render())
        assert "unknown command /nope" in str(main.query(ErrorView).first().render())
        assert "context" in notices


async def test_engine_error_is_shown_inline_with_a_next_step(harness, until):
    app = harness.app([])  # the script holds no reply: the engine call fails
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "hello")
        await turn_done(pilot, until)
        text = str(main.query_one(ErrorView).render())
        assert "no reply left" in text and "→" in text
        assert main.status.state == "ready"  # still usable


async def test_tool_markup_only_answer_creates_a_card_per_call(harness, until, m3text):
    script = [m3text.read_call("src/calc.py"), "It subtracts."]
    app = harness.app(script)
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "read calc")
        await turn_done(pilot, until)
        card = main.query_one(ToolCard)
        assert card.tool_name == "read_file" and card.status == "ok"
        assert "return a - b" in "\n".join(str(s.render()) for s in card.query("Static"))


async def test_sessions_browser_resumes_the_chosen_session(harness, until):
    from m3agent.app.tui.launch import list_sessions
    from m3agent.app.tui.screens.sessions_screen import SessionsScreen

    app = harness.app(["First answer."])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "remember this")
        await turn_done(pilot, until)
        old_id = main.session.id
    app2 = harness.app(["Second answer."],
                       list_sessions=lambda: list_sessions(harness.home / "sessions"))
    async with app2.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        new_id = main.session.id
        await send(pilot, "/sessions")
        await until(pilot, lambda: isinstance(app2.screen, SessionsScreen))
        listed = [s.session_id for s in app2.screen.sessions]
        assert old_id in listed
        option_list = app2.screen.query_one("#sessions-list")
        option_list.focus()
        option_list.highlighted = listed.index(old_id)
        await pilot.press("enter")
        await until(pilot, lambda: main.session is not None and main.session.id == old_id
                    and main.status.state == "ready")
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
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "fix both")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
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
        main.post_message(SessionEvent(ev.ContextEvent("snapshot", {"tokens": 321, "files_included": 2})))
        await pilot.pause(0.05)
        await send(pilot, "/context")
        await pilot.pause(0.05)
        notices = [str(n.render()) for n in main.query(NoticeView)]
        assert any("repository snapshot taken: 2 files, 321 tokens" in n for n in notices)
        assert "tokens: 321" in notices[-1]


async def test_escape_stops_a_running_tool(harness, until, m3text):
    """Built through app/factory (the CLI's seam): the shell runs under the real sandbox."""
    from m3agent.app.factory import build_session
    from m3agent.app.settings import load_settings
    from m3agent.app.tui.app import create_app
    from m3agent.engine.backends.scripted import ScriptedEngine

    ns = m3text.NS
    call = (f"{ns}<tool_call>\n{ns}<invoke name=\"shell\">{ns}<command>sleep 30{ns}</command>"
            f"{ns}</invoke>\n{ns}</tool_call>")
    settings = load_settings().override(engine="scripted", approval="never")

    def factory(resume_id, progress):
        engine = harness.wrap(ScriptedEngine([call, "stopped"]))
        return build_session(settings, cwd=harness.repo, engine=engine)

    app = create_app(factory, harness.config())
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
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "fix add")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await main.action_interrupt()  # as a time limit would end the turn
        await until(pilot, lambda: main.completed_turns >= 1)
        await until(pilot, lambda: app.screen is main)
        assert main.query_one(ToolCard).status == "interrupted"
        assert (harness.repo / "src/calc.py").read_text().endswith("a - b\n")
        assert not [e for e in main.query(ErrorView)]  # no "no pending approval" noise


async def test_undo_restores_the_files_changed_by_the_last_turn(harness, until, m3text):
    """Through app/factory: the session snapshots before the edit; /undo restores it."""
    from m3agent.app.factory import build_session
    from m3agent.app.settings import load_settings
    from m3agent.app.tui.app import create_app
    from m3agent.engine.backends.scripted import ScriptedEngine

    settings = load_settings().override(engine="scripted", approval="never")

    def factory(resume_id, progress):
        engine = harness.wrap(ScriptedEngine([m3text.edit_call("src/calc.py", "a - b", "a + b"),
                                              "Fixed."]))
        return build_session(settings, cwd=harness.repo, engine=engine)

    calc = harness.repo / "src/calc.py"
    app = create_app(factory, harness.config())
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


async def test_ctrl_c_interrupts_only_while_busy(harness, until):
    app = harness.app(["word " * 400, "short"], pause_after=20)
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "talk")
        await until(pilot, lambda: harness.engine.paused.is_set())
        await pilot.press("ctrl+c")
        await turn_done(pilot, until)
        assert any("interrupted" in str(n.render()) for n in main.query(NoticeView))
        prompt = main.query_one(PromptInput)
        prompt.load_text("keep me")
        await pilot.press("ctrl+c")  # idle: the prompt's own key, nothing is interrupted
        assert prompt.text == "keep me" and app.is_running


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
        kinds = [type(w).__name__ for w in main.query_one("#conversation").children
                 if type(w).__name__ in ("UserMessage", "AnswerView")]
        assert kinds == ["UserMessage", "AnswerView", "UserMessage", "AnswerView"]
        assert not main.query_one("#waiting").display
        assert [r.messages[-1].content for r in harness.engine.requests] == ["first", "second"]
