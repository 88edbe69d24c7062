"""Pilot tests: the TUI over a real Session and the real ScriptedEngine."""

from __future__ import annotations

import pytest
from m3agent.app.tui.widgets.answer_view import AnswerView
from m3agent.app.tui.widgets.diff_view import DiffView
from m3agent.app.tui.widgets.error_view import ErrorView
from m3agent.app.tui.widgets.notice_view import NoticeView
from m3agent.app.tui.widgets.prompt_input import PromptInput
from m3agent.app.tui.widgets.reasoning_view import ReasoningView
from m3agent.app.tui.widgets.tool_card import ToolCard
from m3agent.app.tui.widgets.user_message import UserMessage
from PIL import Image
from pilot_steps import at_approval, ready, saved_session, send, turn_done

SIZE = (100, 40)
pytestmark = pytest.mark.anyio


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
    async with at_approval(app, until, "fix add", SIZE) as (pilot, main):
        assert "a + b" in str(app.screen.query_one("#approval-args").render())
        # the edit tool's own preview (Tool.preview), carried by the request
        assert "+    return a + b" in str(app.screen.query_one("#approval-diff").render())
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
    async with at_approval(app, until, "fix add", SIZE) as (pilot, main):
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
        assert not main.controller.busy
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
        assert [m.path for m in first.messages[-1].media] == [
            str((harness.repo / "shot.png").resolve())
        ]
        assert [m.path for m in second.messages[-1].media] == [
            str((harness.repo / "other.png").resolve())
        ]
        assert main.query(ErrorView)  # the missing file is reported, not sent


async def test_resume_shows_history_and_continues_the_conversation(harness, until):
    app = harness.app(["<mm:think>Recall.</mm:think>The answer is 42."])
    session_id = await saved_session(app, until, "what is the answer?", SIZE)
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
        assert "/think [enabled|disabled|adaptive]" in notices and "ctrl+t" in notices
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
