"""Issue 13, class 7, in the TUI: escape sequences in tool output, file names, reasoning and
the answer are shown in their visible form (`\\x1b`), never handed to the terminal raw."""

from __future__ import annotations

import pytest
from m3agent.app.tui.widgets.answer_view import AnswerView
from m3agent.app.tui.widgets.output_view import OutputView
from m3agent.app.tui.widgets.reasoning_view import ReasoningView
from pilot_steps import ready, send, turn_done

pytestmark = pytest.mark.anyio
HOSTILE = "\x1b]52;c;cHduZWQ=\x07\x1b]2;PWNED\x07\x1b[2J\x9b31m\u202etxt"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


async def test_hostile_text_is_rendered_visibly(harness, until, m3text):
    (harness.repo / "notes.txt").write_text(HOSTILE + "\n")
    script = [
        m3text.read_call("notes.txt"),
        f"<mm:think>thinking {HOSTILE}</mm:think>Answer {HOSTILE} end",
    ]
    app = harness.app(script)
    async with app.run_test(size=(120, 40)) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "read notes.txt")
        await turn_done(pilot, until)
        await until(pilot, lambda: all(a.caught_up for a in main.query(AnswerView)))
        main.query_one(ReasoningView).collapsed = False
        await pilot.pause(0.1)
        # Control: the raw bytes did reach the conversation (the model sees the truth).
        assert HOSTILE in main.query_one(AnswerView).text
        shown = {
            "output": "\n".join(main.query_one(OutputView).lines),
            "reasoning": str(main.query_one(ReasoningView)._body.render()),
            "answer": main.query_one(AnswerView).source,
            "screen": app.export_screenshot(),
        }
        for where, text in shown.items():
            for raw in RAW:
                assert raw not in text, (where, repr(raw))
        for where in ("output", "reasoning", "answer"):
            assert "\\x1b]52;c;cHduZWQ=\\x07" in shown[where], where
        assert "\\x1b]52;c;cHduZWQ=\\x07" in shown["screen"].replace("&#160;", " ")
