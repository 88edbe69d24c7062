"""What each slash command does. Each one forwards to the Session, a service handed in by
the CLI, or a read-only look at the workspace (git diff)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from m3agent.agent.ops import Compact, SetThinking
from m3agent.engine.api import ThinkingMode
from m3agent.tools.safe_git import SafeGitError, UserRepo

from ..slash import HELP, NAMES, SlashCommand, next_thinking
from .context_report import format_summary
from .hosts import ScreenHelper
from .review_flow import ReviewFlow
from .rewind import checkpoint_store
from .rewind_flow import open_rewind
from .screens.sessions_screen import SessionsScreen
from .slash_daily import DailyActions
from .slash_share import ShareActions

if TYPE_CHECKING:
    from .ports import SessionLike

KEYS = {
    "Enter": "send",
    "ctrl+j": "new line",
    "↑ / ↓": "prompt history (in the / menu: choose)",
    "ctrl+v": "paste; an image on the clipboard (wl-paste / xclip) is attached",
    "ctrl+r": "search the prompt history for what is typed (again: older; Esc: back)",
    "/": "the command menu; Tab completes, Enter runs",
    "Tab": "complete an @path or a /command (the focus stays in the prompt)",
    "PageUp / PageDown": "scroll the conversation",
    "Home / End": "top / bottom of the conversation (when the prompt is empty)",
    "Esc": "interrupt the model or the running tool",
    "Esc Esc": "when idle: rewind to before an earlier prompt (same as /rewind)",
    "ctrl+c": "interrupt; when idle, clear the prompt; twice on an empty prompt, quit",
    "ctrl+t": "cycle the thinking mode of the next turn",
    "ctrl+b": "send the running shell command to the background (/tasks lists them)",
    "shift+Tab": "cycle default / accept edits / plan mode",
    "ctrl+q": "quit",
    "!COMMAND": "run a shell command in the sandbox; its output goes with the next prompt",
}


class SlashActions(ScreenHelper):
    undone = 0  # /undo restores so far: past the last one, "nothing left", not "yet"

    @functools.cached_property
    def daily(self) -> DailyActions:
        """/clear, /status, ...: the same controller, transcript, app and screen."""
        return DailyActions(self.controller, self.transcript, self.app, self.view)

    @functools.cached_property
    def review(self) -> ReviewFlow:
        """/review, and its findings once the turn ends."""
        return ReviewFlow(self.controller, self.transcript, self.app, self.view)

    @functools.cached_property
    def share(self) -> ShareActions:
        """/export and /fork."""
        return ShareActions(self.controller, self.transcript, self.app, self.view)

    @functools.cached_property
    def handlers(self) -> dict[str, Callable[[str], Awaitable[None]]]:
        """Each slash command's handler: `do_NAME` of the one helper that has it. Built once,
        and refused at once where the table and slash.NAMES disagree (a command no helper
        handles, two helpers for one command, a handler for no command)."""
        table: dict[str, Callable[[str], Awaitable[None]]] = {}
        for helper in (self, self.daily, self.review, self.share):
            for attr in dir(type(helper)):
                if not attr.startswith("do_"):
                    continue
                name = attr.removeprefix("do_")
                if name in table:
                    raise RuntimeError(f"/{name} is handled by two helpers")
                table[name] = getattr(helper, attr)
        if set(table) != set(NAMES):
            missing, extra = sorted(set(NAMES) - set(table)), sorted(set(table) - set(NAMES))
            raise RuntimeError(f"slash handlers: missing {missing}, for no command {extra}")
        return table

    async def run(self, command: SlashCommand) -> None:
        await self.handlers[command.name](command.arg)  # parse_slash knows every command

    async def do_think(self, arg: str) -> None:
        explicit = arg.removeprefix("default ").strip()  # parse_slash checked it names a mode
        mode = ThinkingMode(explicit) if explicit else next_thinking(self.controller.thinking)
        self.view.set_thinking(mode)
        if arg.startswith("default "):  # the session's own mode: it says what it will recompute
            await self.controller.submit(SetThinking(mode, session_default=True))
            return
        await self.transcript.notice(f"thinking: {mode} from the next turn on")

    async def do_attach(self, arg: str) -> None:
        try:  # checked now (exists, readable media, limits), not when the prompt is sent
            part = await asyncio.to_thread(self.controller.attach_file, arg)
        except ValueError as e:
            await self.transcript.error(str(e), "usage")
            return
        await self.transcript.notice(f"attached {arg} ({part.kind}) to the next prompt")

    async def do_undo(self, arg: str) -> None:
        session = self.controller.session
        undo = self.config.undo or (
            _checkpoint_undo(session, self.undone) if session is not None else None
        )
        if undo is None:
            await self.transcript.error("undo is not available in this session", "usage")
            return
        try:
            result = await asyncio.to_thread(undo)
        except Exception as e:  # nothing to undo, or a restore failed: say which
            await self.transcript.error(f"undo failed: {e}", "usage")
            return
        self.undone += 1
        await self.transcript.notice(str(result or "restored the last checkpoint"))

    async def do_rewind(self, arg: str) -> None:
        await open_rewind(self.controller, self.transcript, self.app, self.view.prompt_input)

    async def do_diff(self, arg: str) -> None:
        cwd = self.config.cwd
        try:  # the workspace's repository read as data: none of its config or hooks run
            text = await asyncio.to_thread(_workspace_diff, cwd)
        except SafeGitError as e:
            await self.transcript.error(f"git diff failed: {e}", "usage")
            return
        if not text.strip():
            await self.transcript.notice("no uncommitted changes")
        else:
            await self.transcript.diff(text)

    async def do_compact(self, arg: str) -> None:
        if self.controller.session is None:
            await self.transcript.error("the engine is still loading", "usage")
            return
        await self.transcript.notice("compacting the conversation…")
        await self.controller.submit(Compact())

    async def do_sessions(self, arg: str) -> None:
        lister = self.config.list_sessions
        if lister is None:
            await self.transcript.error("session browsing is not available", "usage")
            return

        sessions = await asyncio.to_thread(lister)
        self.app.push_screen(SessionsScreen(sessions), self._resume)

    async def _resume(self, session_id: str | None) -> None:
        session = self.controller.session
        current = session.id if session is not None else None
        if session_id and session_id != current:
            await self.app.switch_session(session_id)

    async def do_context(self, arg: str) -> None:
        detail = self.controller.last_snapshot_detail
        report = self.config.context_report
        try:
            if report is not None:
                text = str(await asyncio.to_thread(report))
            elif detail is not None:
                text = format_summary(detail, resumed=self.controller.snapshot_from_log)
            else:
                text = "context: not available (this session has no repository snapshot)"
        except Exception as e:  # a report that fails is shown, not fatal
            await self.transcript.error(f"context report failed: {e}", "internal")
            return
        prefix = self.controller.usage.prefix_line()
        await self.transcript.notice(text if prefix is None else f"{text}\n{prefix}")

    async def do_mcp(self, arg: str) -> None:
        from ..mcp.reload import slash_mcp  # the tool set and MCP: on /mcp only

        try:
            text = await slash_mcp(self.controller.session, arg)
        except ValueError as e:  # a usage mistake, a busy session, a bad config file
            await self.transcript.error(str(e), "usage")
            return
        await self.transcript.notice(text)

    async def do_help(self, arg: str) -> None:
        lines = ["Commands:"] + _aligned(HELP) + ["Keys:"] + _aligned(KEYS)
        await self.transcript.notice("\n".join(lines))

    async def do_quit(self, arg: str) -> None:
        await self.app.shutdown()


def _aligned(rows: dict[str, str]) -> list[str]:
    width = max(map(len, rows))
    return [f"  {k.ljust(width)}  {v}" for k, v in rows.items()]


def _workspace_diff(cwd: Path) -> str:
    repo = UserRepo.open(Path(cwd))
    if repo is None:
        raise SafeGitError(f"{cwd} is not a git repository")
    return repo.diff()


def _checkpoint_undo(session: SessionLike, undone: int = 0) -> Callable[[], str] | None:
    """The session snapshots through a bound `Checkpoints.snapshot`; undo restores the newest
    checkpoint of that same store (taken before the last turn's first change)."""
    store = checkpoint_store(session)
    if store is None:
        return None

    def undo() -> str:
        entries = store.list()  # newest first
        if not entries and undone:
            raise ValueError(f"nothing left to undo: {undone} checkpoint(s) already restored")
        if not entries:
            raise ValueError("no checkpoint yet (one is taken before the first edit of a turn)")
        removed = store.restore(entries[0].id)
        extra = f"; removed {len(removed)} new file(s)" if removed else ""
        return f"restored the files as they were before: {entries[0].label}{extra}"

    return undo


async def shutdown_session(session: SessionLike | None, *, close_engine: bool = False) -> None:
    """Ends the session (its log is flushed and closed); the engine too when leaving."""
    if session is None:
        return
    try:
        await asyncio.wait_for(session.close(), timeout=10)
        if close_engine:
            await asyncio.wait_for(session.engine.close(), timeout=10)
    except TimeoutError:
        pass  # a wedged engine must not keep the terminal hostage on exit
