"""Background commands in the TUI: ctrl+b sends the shell command a tool call is waiting for to
the background (the call returns, the turn goes on), /tasks and /ps list them, show one's
output and stop one. Pilot over the real factory: the real shell tool under the real sandbox,
the model a ScriptedEngine emitting M3 tool-call markup."""

from __future__ import annotations

import pytest
from m3agent.app.tui.widgets.error_view import ErrorView
from m3agent.tools.toolset import background_jobs
from pilot_steps import notice_after, ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (110, 34)
TICKER = "while true; do echo x >> ticks; sleep 0.02; done"


async def test_ctrl_b_then_tasks_show_and_stop(harness, until, m3home, m3text):
    command = f"echo first; touch started; {TICKER}"
    app = harness.factory_app(
        [
            m3text.shell_call(command, "Starting the watcher."),
            "</mm:think>It runs.",
            "</mm:think>Noted.",
        ]
    )
    repo = harness.repo
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        nothing = await notice_after(pilot, until, "/ps")
        assert nothing.startswith("no background commands")
        await send(pilot, "start the watcher")
        await until(pilot, lambda: (repo / "started").exists())
        await pilot.press("ctrl+b")
        await turn_done(pilot, until)  # the call returned: the model answered
        jobs = background_jobs(main.controller.session.toolset)
        (job,) = jobs.jobs()
        assert job.id == "b1" and job.running
        # the model saw that its command went on in the background
        tool_msg = [m for m in main.controller.session.messages if m.role == "tool"][-1]
        assert tool_msg.content.startswith("moved to the background by the user as b1")
        listing = await notice_after(pilot, until, "/tasks")
        assert listing.startswith("b1: running after ") and "echo first" in listing
        shown = await notice_after(pilot, until, "/tasks b1")
        assert shown.startswith("b1: running") and "\nfirst" in shown
        stopped = await notice_after(pilot, until, "/ps stop b1")
        assert stopped.startswith("stopped b1 (stopped)")
        size = (repo / "ticks").stat().st_size
        await pilot.pause(0.3)
        assert (repo / "ticks").stat().st_size == size  # the whole tree is gone
        await send(pilot, "/tasks stop b7")
        await until(pilot, lambda: bool(main.query(ErrorView)))
        assert "no background command 'b7' (there are: b1)" in str(
            main.query(ErrorView).last().render()
        )
        # the model learns with the next prompt that the user stopped its command
        await send(pilot, "is it still running?")
        await turn_done(pilot, until, 2)
    prompt = [m.content for m in harness.engine.requests[-1].messages if m.role == "user"][-1]
    assert prompt.startswith("is it still running?\n\n<background_commands>\nb1 ended (stopped")
    assert "stopped by the user" in prompt and prompt.endswith("</background_commands>")


async def test_ctrl_b_with_nothing_running_says_so(harness, until, m3home):
    app = harness.factory_app([])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, until)
        notice = await notice_after(pilot, until, keys=("ctrl+b",))
        assert notice.startswith("no command is running in the foreground")
