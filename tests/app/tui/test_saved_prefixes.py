"""Saved shell prefixes: `s` in the approval of a shell command saves its prefix for later
sessions (user scope, <home>/permissions.json); a project's .m3agent/permissions.json counts
only after /permissions trust, and only for the content that was trusted."""

from __future__ import annotations

import json

import pytest
from m3agent.app.tui.screens.approval_screen import ApprovalScreen
from m3agent.app.tui.screens.confirm_screen import ConfirmScreen
from pilot_steps import at_approval, notice_after, ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (110, 40)


def _app(harness, script):
    return harness.factory_app(script, approval="untrusted")


async def test_s_saves_the_prefix_for_later_sessions(harness, until, m3text, m3home):
    app = _app(harness, [m3text.shell_call("echo one"), "Done."])
    async with at_approval(app, until, "run it", SIZE) as (pilot, _):
        labels = [str(b.label) for b in app.screen.query("Button")]
        assert "Always allow `echo …`, saved (s)" in labels
        await pilot.press("s")
        await turn_done(pilot, until)
    saved = json.loads((m3home / "permissions.json").read_text())
    assert saved["shell_prefixes"] == [["echo"]]
    assert (m3home / "permissions.json").stat().st_mode & 0o777 == 0o600
    app2 = _app(harness, [m3text.shell_call("echo two"), m3text.shell_call("ls"), "Done."])
    async with app2.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "again")
        # echo runs without a question; ls (not saved) is asked about: the control
        await until(pilot, lambda: isinstance(app2.screen, ApprovalScreen))
        assert app2.screen.request.arguments["command"] == "ls"
        await pilot.press("y")
        await turn_done(pilot, until)
        assert main.controller.allowed_prefixes == [("echo",)]


async def test_project_prefixes_count_only_after_trust(harness, until, m3text, m3home):
    project = harness.repo / ".m3agent" / "permissions.json"
    project.parent.mkdir()
    project.write_text(json.dumps({"shell_prefixes": [["echo"]]}))
    app = _app(harness, [m3text.shell_call("echo one"), "Done."])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        assert main.controller.allowed_prefixes == []  # untrusted: not used
        text = await notice_after(pilot, until, "/permissions")
        assert (
            "is not trusted: `m3agent permissions trust` (the TUI's /permissions trust) uses them"
            in text
        )
        await send(pilot, "/permissions trust")  # shows what it would trust, then asks
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "\n  allow shell prefix: echo\n" in app.screen.question
        await pilot.press("y")
        await until(pilot, lambda: main.controller.allowed_prefixes == [("echo",)])
        await send(pilot, "run")
        await turn_done(pilot, until)  # no question: the trusted project prefix covers it
        assert not isinstance(app.screen, ApprovalScreen)
    project.write_text(json.dumps({"shell_prefixes": [["echo"], ["rm"]]}))  # edited
    app2 = _app(harness, [])
    async with app2.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        assert main.controller.allowed_prefixes == []  # trust was for the old content
