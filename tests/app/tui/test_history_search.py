"""ctrl+r searches the prompt history (bash's and Claude Code's key): the typed text is the
query, ctrl+r again goes older, Esc brings the draft back, Enter sends the found prompt."""

from __future__ import annotations

import pytest
from m3agent.app.tui.widgets.prompt_input import PromptInput
from pilot_steps import ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (100, 30)


async def test_ctrl_r_finds_older_prompts(harness, until):
    app = harness.app(["</mm:think>a", "</mm:think>b", "</mm:think>c", "</mm:think>d"])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        for n, text in enumerate(["run the tests", "fix the parser", "run the linter"], 1):
            await send(pilot, text)
            await turn_done(pilot, until, n)
        prompt = main.query_one(PromptInput)
        prompt.focus()
        await pilot.press("r", "u", "n", "ctrl+r")
        assert prompt.text == "run the linter" and "history search: run" in str(prompt.border_title)
        await pilot.press("ctrl+r")
        assert prompt.text == "run the tests"
        await pilot.press("ctrl+r")  # nothing older: stays, and says so
        assert prompt.text == "run the tests" and "no older match" in str(prompt.border_title)
        await pilot.press("escape")  # the draft comes back; Esc did not reach the screen
        assert prompt.text == "run" and not prompt.border_title
        await pilot.press("ctrl+r", "enter")  # found, then sent as it is
        await turn_done(pilot, until, 4)
    sent = [m.content for m in harness.engine.requests[-1].messages if m.role == "user"]
    assert sent[-1] == "run the linter"
