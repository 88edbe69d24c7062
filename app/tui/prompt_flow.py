"""What happens to a submitted prompt: history, slash command, or a UserTurn that is sent
now or waits for the running turn (one turn at a time, in order)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from m3agent.agent.ops import UserTurn
from m3agent.app.tui.attachments import media_in_prompt
from m3agent.app.tui.history import append_history
from m3agent.app.tui.slash import SlashError, parse_slash
from textual.widgets import Static

if TYPE_CHECKING:
    from m3agent.app.tui.screens.main_screen import MainScreen


class PromptFlow:
    def __init__(self, screen: MainScreen) -> None:
        self.screen = screen

    async def submitted(self, text: str) -> None:
        screen = self.screen
        if screen.history_path is not None:
            append_history(screen.history_path, text)
        try:
            command = parse_slash(text)
        except SlashError as e:
            await screen.transcript.error(str(e), "usage")
            return
        if command is not None:
            await screen.slash.run(command)
            return
        if screen.session is None and screen.status.state == "failed":
            await screen.transcript.error(
                "no engine: it failed to start (see above); fix that and start m3agent again",
                "usage",
            )
            return
        media = tuple(screen.attachments) + media_in_prompt(text, screen.config.cwd)
        screen.attachments.clear()
        turn = UserTurn(text=text, media=media, thinking_mode=screen.thinking)  # type: ignore[arg-type]
        if not screen.busy:
            # Shown at once; while a turn streams it would land inside that answer, so a
            # waiting prompt is shown when it is sent (the line above the prompt counts them).
            await screen.transcript.user(text, tuple(m.path for m in media))
        screen.queued.append((turn, not screen.busy))
        self.show_waiting()
        await self.send_next()

    async def send_next(self) -> None:
        screen = self.screen
        if screen.session is None or screen.busy or not screen.queued:
            return
        turn, shown = screen.queued.pop(0)
        self.show_waiting()
        if not shown:
            await screen.transcript.user(turn.text, tuple(m.path for m in turn.media))
        screen.busy = True
        screen.set_status(state="working")
        await screen.submit(turn)

    def show_waiting(self) -> None:
        waiting = self.screen.query_one("#waiting", Static)
        n = sum(1 for _, shown in self.screen.queued if not shown)
        waiting.update(f"{n} prompt{'s' if n > 1 else ''} waiting for this turn (Esc stops the "
                       "turn; they are sent after it)" if n else "")
        waiting.display = n > 0
