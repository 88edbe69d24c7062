"""Issue 37 item 10, through Pilot with a real Session on the scripted engine: the approval
modal's Deny button is whole at 120 columns; /status names the engine once; /rewind labels a
prompt sent after `!cmd` by what the user typed; /clear empties the status bar's figures."""

from __future__ import annotations

import pytest
from m3agent.app.tui.screens.rewind_screen import RewindScreen
from m3agent.app.tui.widgets.notice_view import NoticeView
from pilot_steps import at_approval, ready, send, turn_done

pytestmark = pytest.mark.anyio


async def test_every_approval_button_is_whole_at_120_columns(harness, until, m3text):
    script = [m3text.shell_call("git status --short"), "Done."]
    app = harness.factory_app(script, approval="untrusted")
    async with at_approval(app, until, "run things", (120, 40)) as (pilot, main):
        screen = app.screen.region
        for b in app.screen.query("Button"):
            label = str(b.label)
            assert b.content_region.width >= len(label), label
            assert b.region.right <= screen.right, label  # not cut by the screen's edge
        await pilot.press("n")
        await pilot.press("enter")
        await turn_done(pilot, until)


async def test_status_rewind_and_clear_say_the_right_thing(harness, until):
    app = harness.factory_app(["First.", "Second."])
    async with app.run_test(size=(100, 30)) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "/status")
        await until(pilot, lambda: "engine" in str(main.query(NoticeView).last().render()))
        status = str(main.query(NoticeView).last().render())
        engine_row = next(line for line in status.splitlines() if line.startswith("engine"))
        assert engine_row.split() == ["engine", "scripted"]
        await send(pilot, "!echo hi")
        await until(pilot, lambda: "$ echo hi" in str(main.query(NoticeView).last().render()))
        await send(pilot, "fix the tests")
        await turn_done(pilot, until)
        assert main.status.context_used  # the call's figures are in the status bar
        await send(pilot, "/rewind")
        await until(pilot, lambda: isinstance(app.screen, RewindScreen))
        labels = [str(o.prompt) for o in app.screen.query_one("OptionList")._options]
        assert labels == ["1. fix the tests"]
        await pilot.press("escape")
        await send(pilot, "/clear")
        await until(
            pilot, lambda: main.controller.session is not None and not main.status.context_used
        )
        assert main.status.cached_tokens is None and main.status.tokens_per_s is None
