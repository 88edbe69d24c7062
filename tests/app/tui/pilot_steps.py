"""Steps the Pilot tests share: wait for the session, type a prompt, wait for turns, run an
app up to its approval modal or through one saved turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from m3agent.app.tui.screens.approval_screen import ApprovalScreen
from m3agent.app.tui.widgets.notice_view import NoticeView
from m3agent.app.tui.widgets.prompt_input import PromptInput

# The snapshot's notice comes from the event pump, which starts with the session: it can land
# after `ready` returns, so a step waiting for "the next notice" must not take it for its own.
# Notices the session's start posts whenever it gets there, not in answer to a step.
_STARTUP_NOTICES = (
    "repository snapshot taken",
    "repository snapshot refreshed",
    "resumed session ",
)


async def ready(pilot, until):
    main = pilot.app.main
    await until(pilot, lambda: main.controller.session is not None and main.status.state == "ready")
    return main


async def send(pilot, text: str) -> None:
    prompt = pilot.app.main.query_one(PromptInput)
    prompt.focus()
    prompt.load_text(text)
    await pilot.press("enter")


async def notice_after(pilot, until, text: str | None = None, keys: tuple[str, ...] = ()) -> str:
    """Sends TEXT as a prompt (or presses KEYS) and returns the first notice that appears after
    it, leaving aside the session start's own notices (snapshot, resumed) whenever they land."""
    main = pilot.app.main
    seen = {id(n) for n in main.query(NoticeView)}

    def fresh() -> list[str]:
        texts = (str(n.render()) for n in main.query(NoticeView) if id(n) not in seen)
        return [t for t in texts if not t.startswith(_STARTUP_NOTICES)]

    if keys:
        await pilot.press(*keys)
    else:
        assert text is not None
        await send(pilot, text)
    await until(pilot, lambda: bool(fresh()))
    return fresh()[0]


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
