"""/rewind and Esc-Esc on the main screen: the picker, then the files (the checkpoint store
/undo uses) and the conversation (a rewind record appended to the session log)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..permission_modes import PLAN_INSTRUCTION
from .rewind import RewindPoint, checkpoint_store, restore_files, rewind_points
from .screens.rewind_screen import CONVERSATION, FILES, RewindScreen

if TYPE_CHECKING:
    from .controller import SessionController
    from .hosts import AppHost
    from .transcript import Transcript
    from .widgets.prompt_input import PromptInput

DOUBLE_ESC_S = 0.5  # a second Esc within this time, while idle, opens the picker


async def open_rewind(
    controller: SessionController, transcript: Transcript, app: AppHost, prompt: PromptInput
) -> None:
    c, t = controller, transcript
    session = c.session
    if session is None:
        await t.error("the engine is still loading", "usage")
        return
    if c.busy or c.queue:
        await t.error("a turn is running: Esc stops it first, then /rewind", "usage")
        return
    points = rewind_points(session.conversation.path, session.messages)
    if not points:
        await t.notice("nothing to rewind to: no prompt in this conversation yet")
        return

    async def chosen(choice: tuple[RewindPoint, str] | None) -> None:
        if choice is not None:
            await rewind_to(c, t, prompt, *choice)

    app.push_screen(RewindScreen(points), chosen)


async def rewind_to(
    controller: SessionController,
    transcript: Transcript,
    prompt: PromptInput,
    point: RewindPoint,
    what: str,
) -> None:
    c, t = controller, transcript
    session = c.session
    if session is None or c.busy or c.queue:  # a prompt was sent while the picker was open
        await t.error("a turn is running: the rewind was not done", "usage")
        return
    files = "files: left as they are"
    if what != CONVERSATION:
        try:
            files = await asyncio.to_thread(restore_files, checkpoint_store(session), point)
        except Exception as e:  # a failed restore: the conversation is not rewound either
            await t.error(f"rewind failed: the files could not be restored: {e}", "usage")
            return
    if what == FILES:
        await t.notice(f"{files}; the conversation is unchanged")
        return
    try:
        session.rewind(point.index, {"turn": point.turn, "files": files})
    except (RuntimeError, ValueError) as e:
        await t.error(f"rewind failed: {e}", "usage")
        return
    await t.clear()  # the conversation as it now is; the rewind's notice follows it
    await t.history(session.messages, c.tool_errors(), c.tool_metadata())
    # Claude Code's habit: the prompt is back, to edit or resend (without plan mode's note).
    prompt.load_text(point.text.removesuffix(PLAN_INSTRUCTION))
    prompt.move_cursor(prompt.document.end)
