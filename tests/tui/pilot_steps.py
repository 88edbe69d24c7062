"""Steps the Pilot tests share: wait for the session, type a prompt, wait for turns."""

from __future__ import annotations

from m3agent.app.tui.widgets.prompt_input import PromptInput


async def ready(pilot, until):
    main = pilot.app.main
    await until(pilot, lambda: main.controller.session is not None and main.status.state == "ready")
    return main


async def send(pilot, text: str) -> None:
    prompt = pilot.app.main.query_one(PromptInput)
    prompt.focus()
    prompt.load_text(text)
    await pilot.press("enter")


async def turn_done(pilot, until, n: int = 1) -> None:
    await until(pilot, lambda: pilot.app.main.controller.completed_turns >= n)
    await pilot.pause(0.05)
