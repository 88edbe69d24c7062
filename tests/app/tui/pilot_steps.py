"""Steps the Pilot tests share: wait for the session, type a prompt, wait for turns, run an
app up to its approval modal or through one saved turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from m3agent.app.tui.screens.approval_screen import ApprovalScreen
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


@asynccontextmanager
async def at_approval(app, until, text: str, size: tuple[int, int]) -> AsyncIterator:
    """Runs APP at SIZE, sends TEXT once the session is ready and yields (pilot, main) with
    the approval modal of the turn's first tool call on screen."""
    async with app.run_test(size=size) as pilot:
        main = await ready(pilot, until)
        await send(pilot, text)
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        yield pilot, main


async def saved_session(app, until, text: str, size: tuple[int, int]) -> str:
    """Runs APP at SIZE for one turn of TEXT and quits; the id of the session it saved."""
    async with app.run_test(size=size) as pilot:
        main = await ready(pilot, until)
        await send(pilot, text)
        await turn_done(pilot, until)
        return main.controller.session.id
