"""The TUI gets the approval gate's answers, the same as `m3agent run` and ACP
(tests/app/test_gate_decides.py, same script): a saved shell prefix runs its command
unasked, the per-program rules keep a wrapper (`timeout 5 echo ...`) outside it, and plan
mode denies even a saved prefix. Driven through Textual's Pilot over the real factory."""

from __future__ import annotations

import json

import pytest
from m3agent.app.tui.screens.approval_screen import ApprovalScreen
from m3agent.app.tui.widgets.tool_card import ToolCard
from pilot_steps import ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (110, 40)
ASKED = ["timeout 5 echo two", "ls"]  # as tests/app/test_gate_decides.py


def _save_echo(home) -> None:
    (home / "permissions.json").write_text(json.dumps({"shell_prefixes": [["echo"]]}))


async def test_tui_honours_a_saved_prefix_and_asks_the_rest(harness, until, m3text, m3home):
    _save_echo(m3home)
    shell = m3text.shell_call
    script = [shell("echo one"), shell("timeout 5 echo two"), shell("ls"), "Done."]
    app = harness.factory_app(script, approval="untrusted")
    asked: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "go")
        for _ in ASKED:
            await until(
                pilot,
                lambda: (
                    isinstance(app.screen, ApprovalScreen)
                    and app.screen.request.arguments["command"] not in asked
                ),
            )
            asked.append(app.screen.request.arguments["command"])
            assert app.screen.request.amendment != ("echo",)  # the gate offers its own
            await pilot.press("escape")  # deny, as the other front ends' tests do
        await turn_done(pilot, until)
        cards = list(main.query(ToolCard))
        assert cards[0].status == "ok" and cards[0].note == "allowed: echo …"
        assert [c.status for c in cards[1:]] == ["denied", "denied"]
    assert asked == ASKED


async def test_tui_honours_a_saved_path_rule(harness, until, m3text, m3home):
    (m3home / "permissions.json").write_text(
        json.dumps({"rules": {"write_file(notes/**)": "allow"}})
    )
    call = m3text.NS + "<tool_call>\n" + m3text.NS + '<invoke name="write_file">'

    def write(path: str) -> str:
        ns = m3text.NS
        return (
            f"{call}{ns}<path>{path}{ns}</path>{ns}<content>x\n{ns}</content>"
            f"{ns}</invoke>\n{ns}</tool_call>"
        )

    app = harness.factory_app([write("notes/a.txt"), write("b.txt"), "Done."], approval="untrusted")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot, until)
        await send(pilot, "go")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        assert app.screen.request.arguments["path"] == "b.txt"  # as `m3agent run` and ACP
        await pilot.press("escape")
        await turn_done(pilot, until)
    assert (harness.repo / "notes/a.txt").exists() and not (harness.repo / "b.txt").exists()


async def test_tui_in_plan_mode_denies_even_a_saved_prefix(harness, until, m3text, m3home):
    _save_echo(m3home)
    app = harness.factory_app([m3text.shell_call("echo one"), "Plan."], approval="untrusted")
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await pilot.press("shift+tab", "shift+tab")  # accept edits, then plan
        assert main.controller.mode == "plan"
        await send(pilot, "go")
        await turn_done(pilot, until)
        assert not isinstance(app.screen, ApprovalScreen)
        (card,) = main.query(ToolCard)
        assert card.status == "denied"
