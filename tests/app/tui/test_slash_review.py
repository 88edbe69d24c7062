"""/review in the TUI (Pilot over the CLI's session factory, a real git repository): the
diff goes to the model as one turn shown as the command typed, and the answer's findings are
listed by file and line; a bad target is one error line and no turn. The prompt goes as it
is: an `@logo.png` in the diff attaches nothing, and in plan mode no plan question follows."""

from __future__ import annotations

import json

import pytest
from m3agent.app.tui.screens.plan_screen import PlanScreen
from m3agent.app.tui.widgets.error_view import ErrorView
from m3agent.app.tui.widgets.notice_view import NoticeView
from m3agent.app.tui.widgets.user_message import UserMessage
from pilot_steps import ready, send, turn_done
from png_bytes import PNG

pytestmark = pytest.mark.anyio

FINDINGS = {
    "findings": [{"file": "src/calc.py", "line": 2, "priority": "P0", "title": "add subtracts"}],
    "summary": "add() is wrong.",
}


async def test_review_lists_findings_and_refuses_bad_targets(harness, until):
    (harness.repo / "src" / "calc.py").write_text(
        "def add(a, b):  # @logo.png\n    return a - b - 0\n"
    )
    (harness.repo / "logo.png").write_bytes(PNG)
    app = harness.factory_app(["</mm:think>" + json.dumps(FINDINGS), "</mm:think>not json"])
    async with app.run_test(size=(110, 34)) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "/review --base nope")
        await until(pilot, lambda: bool(main.query(ErrorView)))
        assert "--base 'nope': no such branch" in str(main.query(ErrorView).last().render())
        assert not harness.engine.requests  # nothing was sent

        await pilot.press("shift+tab", "shift+tab")  # plan mode
        assert main.controller.mode == "plan"
        await send(pilot, "/review mind the signs")
        await turn_done(pilot, until)
        await until(pilot, lambda: "review findings" in str(main.query(NoticeView).last().render()))
        notice = str(main.query(NoticeView).last().render())
        assert "src/calc.py:2: [P0] add subtracts" in notice and "1 finding" in notice
        shown = [str(m.render()) for m in main.query(UserMessage)]
        assert any("/review mind the signs" in s for s in shown)
        assert not any("<diff>" in s for s in shown)  # the command, not the whole prompt
        last = harness.engine.requests[-1].messages[-1]
        assert "+    return a - b - 0" in last.content and "Also: mind the signs" in last.content
        assert not last.media and "<plan_mode>" not in last.content
        assert not isinstance(app.screen, PlanScreen)

        await send(pilot, "/review")  # an answer that is no findings list: said so
        await turn_done(pilot, until, 2)
        await until(pilot, lambda: "review: the answer is not JSON" in _errors(main))


def _errors(main) -> str:
    return " ".join(str(e.render()) for e in main.query(ErrorView))
