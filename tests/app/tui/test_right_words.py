"""Issue 22 item 8, the wrong words: a native model through its server is "native (serve)",
not "remote"; "… tok/s" while the first call runs, not "- tok/s"; an interrupted tool stays
"interrupted" after resume; /undo past the last checkpoint says nothing is left; the approval
modal's s has a button and p says it lasts the session; /compact says what it freed."""

from __future__ import annotations

import pytest
from m3agent.app.context_notice import describe_context_event
from m3agent.app.tui.status import StatusState, engine_label
from m3agent.app.tui.widgets.error_view import ErrorView
from m3agent.app.tui.widgets.tool_card import ToolCard
from pilot_steps import at_approval, ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (110, 34)


def test_engine_label_and_speed_words():
    assert engine_label("native", "remote") == "native (serve)"
    assert engine_label("remote", "remote") == "remote"  # a real remote server (control)
    assert engine_label("native", "native") == "native"
    working = StatusState(engine="scripted", state="working").render()
    assert "… tok/s" in working and "- tok/s" not in working
    assert "- tok/s" in StatusState(engine="scripted", state="ready").render()


def test_compact_says_what_it_freed():
    line = describe_context_event(
        "compact",
        {"messages_before": 24, "messages_after": 4, "summary_source": "model",
         "tokens_before": 12345},
    )  # fmt: skip
    assert line == (
        "conversation compacted: 24 → 4 messages (the model's summary); the prompt held "
        "12,345 tokens, the next request shows what is left"
    )
    nothing = describe_context_event("compact", {"note": "nothing to compact"})
    assert nothing.startswith("nothing to compact")


async def test_interrupted_tool_stays_interrupted_after_resume(harness, until, m3text):
    script = [m3text.shell_call("sleep 30"), "stopped"]
    async with harness.factory_app(script).run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "wait a bit")
        await until(pilot, lambda: bool(main.query(ToolCard)))
        await pilot.pause(0.5)
        await pilot.press("escape")
        await turn_done(pilot, until)
        assert main.query_one(ToolCard).status == "interrupted"
        sid = main.controller.session.id
    app2 = harness.factory_app(script, resume=sid)
    async with app2.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await pilot.pause(0.1)
        assert [c.status for c in main.query(ToolCard)] == ["interrupted"]


async def test_undo_past_the_last_checkpoint(harness, until, m3text):
    script = [m3text.edit_call("src/calc.py", "a - b", "a + b"), "fixed"]
    # through app/factory: the real checkpoints of the workspace
    async with harness.factory_app(script).run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        errors = lambda: [str(e.render()) for e in main.query(ErrorView)]  # noqa: E731
        await send(pilot, "/undo")  # before any edit: "yet" is right here
        await until(pilot, lambda: bool(errors()))
        assert "no checkpoint yet" in errors()[-1]
        await send(pilot, "fix add")
        await turn_done(pilot, until)
        await send(pilot, "/undo")
        await until(pilot, lambda: "a - b" in (harness.repo / "src/calc.py").read_text())
        await send(pilot, "/undo")
        await until(pilot, lambda: len(errors()) == 2)
        assert "nothing left to undo: 1 checkpoint(s) already restored" in errors()[-1]


async def test_approval_modal_buttons_say_how_long(harness, until, m3text):
    app = harness.app(
        [m3text.edit_call("src/calc.py", "a - b", "a + b"), "fixed"], approval="untrusted"
    )
    async with at_approval(app, until, "fix add", SIZE) as (pilot, main):
        labels = [str(b.label) for b in app.screen.query("Button")]
        assert "Always allow edit_file, saved (s)" in labels
        assert "Allow edit_file for this session (a)" in labels
        await pilot.click("#approve_always")
        await turn_done(pilot, until)
        assert main.query_one(ToolCard).status == "ok"
