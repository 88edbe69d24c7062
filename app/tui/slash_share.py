"""/export and /fork: the session written out as Markdown and JSON (agent/session_export.py),
and a new session that starts from this one's conversation (Conversation.fork: the same
prompt prefix, so the engine's prefix cache serves it). The original stays as it was and
resumable; `m3agent resume` and /sessions list both, the fork marked as one."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from m3agent.agent.session_export import export_json, export_markdown, write_export

from ..safe_text import dumps
from .hosts import ScreenHelper
from .screens.confirm_screen import ConfirmScreen

FORMATS = (".md", ".json")


def export_targets(arg: str, cwd: Path, session_id: str) -> list[Path]:
    """Where /export writes: FILE.md or FILE.json (that one), a directory or nothing (both,
    named after the session, in it or in the workspace). ValueError: usage."""
    raw = arg.strip()
    where = (cwd / Path(raw).expanduser()) if raw else cwd
    if raw and where.suffix in FORMATS:
        if not where.parent.is_dir():
            raise ValueError(f"/export {raw}: no such directory {where.parent}")
        return [where]
    if not where.is_dir():
        raise ValueError(f"usage: /export [FILE.md | FILE.json | DIR] ({raw}: neither)")
    return [where / f"m3agent-{session_id}{suffix}" for suffix in FORMATS]


class ShareActions(ScreenHelper):
    async def do_export(self, arg: str) -> None:
        session = self.controller.session
        if session is None:
            await self.transcript.error("the engine is still loading", "usage")
            return
        try:
            targets = export_targets(arg, Path(self.config.cwd), session.id)
        except ValueError as e:
            await self.transcript.error(str(e), "usage")
            return
        meta, messages = session.conversation.meta, session.messages
        texts = {
            ".md": export_markdown(meta, messages),
            ".json": dumps(export_json(meta, messages)) + "\n",
        }
        files = [(p, texts[p.suffix]) for p in targets]
        existing = [str(p) for p, _ in files if os.path.lexists(p)]  # a dangling link too
        if not existing:
            await self._write(files, replace=False)
            return

        async def answered(yes: bool | None) -> None:
            if yes:
                await self._write(files, replace=True)
            else:
                await self.transcript.notice("export cancelled: nothing was written")

        self.app.push_screen(ConfirmScreen(f"Replace {' and '.join(existing)}?"), answered)

    async def _write(self, files: list[tuple[Path, str]], *, replace: bool) -> None:
        session = self.controller.session
        roots = session.model_writable() if session is not None else (Path(self.config.cwd),)
        try:
            for path, text in files:
                await asyncio.to_thread(write_export, path, text, roots=roots, replace=replace)
        except FileExistsError as e:  # appeared since it was checked
            await self.transcript.error(f"{e} exists now: /export again to replace it", "usage")
            return
        except OSError as e:
            await self.transcript.error(f"cannot write the export: {e}", "usage")
            return
        await self.transcript.notice("exported to " + " and ".join(str(p) for p, _ in files))

    async def do_fork(self, arg: str) -> None:
        c = self.controller
        session = c.session
        if session is None:
            await self.transcript.error("the engine is still loading", "usage")
            return
        if c.busy or c.queue:
            await self.transcript.error("a turn is running: Esc stops it first", "usage")
            return
        old = session.conversation
        try:
            fork = await asyncio.to_thread(old.fork, old.path.parent)
        except Exception as e:  # a log that cannot be written: said, the session goes on
            await self.transcript.error(f"cannot fork: {e}", "usage")
            return
        fork.close()
        await self.app.switch_session(fork.id)
        await self.transcript.notice(
            f"forked into session {fork.id}; the original: m3agent resume {old.id}"
        )
