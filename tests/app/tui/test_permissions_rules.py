"""`/permissions allow|deny|remove RULE` (issue 22): a per-path rule saved in the user scope,
applied to the running session at once and to later ones; `/permissions` lists it. Pilot over
the real factory, the ScriptedEngine emitting real M3 edit_file calls, approval untrusted."""

from __future__ import annotations

import json

import pytest
from m3agent.app.tui.screens.approval_screen import ApprovalScreen
from m3agent.app.tui.widgets.error_view import ErrorView
from m3agent.app.tui.widgets.notice_view import NoticeView
from pilot_steps import ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (120, 34)


def _app(harness, replies):
    return harness.factory_app(replies, approval="untrusted")


def _last(main, view) -> str:
    return str(main.query(view).last().render()) if main.query(view) else ""


async def test_a_saved_path_rule_allows_edits_under_src_only(harness, until, m3home, m3text):
    replies = [
        m3text.edit_call("src/calc.py", "a - b", "a + b"),
        "</mm:think>done",
        m3text.edit_call("README.md", "demo", "DEMO"),
        "</mm:think>asked",
    ]
    app = _app(harness, replies)
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "/permissions allow edit_file(src/**)")
        await until(pilot, lambda: "saved: edit_file(src/**) = allow" in _last(main, NoticeView))
        await send(pilot, "fix it")
        await turn_done(pilot, until)  # no question asked: the rule covers src/calc.py
        assert "a + b" in (harness.repo / "src/calc.py").read_text()
        await send(pilot, "and the readme")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))  # not under src
        await pilot.press("n")
        await pilot.press("enter")
        await turn_done(pilot, until, 2)
        await send(pilot, "/permissions")
        await until(pilot, lambda: "edit_file(src/**) = allow" in _last(main, NoticeView))
        await send(pilot, "/permissions allow edit_file(../x/**)")
        await until(pilot, lambda: "outside the workspace" in _last(main, ErrorView))
        await send(pilot, "/permissions remove edit_file(src/**)")
        await until(pilot, lambda: "removed edit_file(src/**)" in _last(main, NoticeView))
        assert all("src/**" not in r.tool for r in main.controller.session.gate.rules)
    saved = json.loads((m3home / "permissions.json").read_text())
    assert saved.get("rules") == {}
