"""Runs the app in the real terminal: exit code, the crash log's path on a crash, and the
command that resumes the session on a normal exit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .. import exit_codes
from .app import _log_dir, create_app
from .crash import crash_summary, write_crash_log, write_crash_text
from .ports import SessionFactory, TuiConfig

if TYPE_CHECKING:
    from collections.abc import Callable


def run_tui(session_factory: SessionFactory, config: TuiConfig, *, headless: bool = False) -> int:
    app = create_app(session_factory, config)
    try:
        # --inline: below the shell prompt, without the alternate screen and the mouse, so the
        # terminal keeps its scrollback and its own selection; the last frame stays on exit.
        inline = config.inline and not headless
        app.run(headless=headless, inline=inline, inline_no_clear=inline, mouse=not inline)
    except Exception as error:  # outside Textual's own handler (driver start-up, teardown)
        crash = error  # the except name is unbound once the block ends
        path = _safe(lambda: write_crash_log(crash, _log_dir(config)))
        _report(f"{type(error).__name__}: {error}", path)
        return exit_codes.INTERNAL_ERROR
    report = app.crash_report.getvalue()
    if report.strip() or app.return_code not in (0, None):
        # Textual has restored the terminal; its traceback went to app.error_console.
        path = _safe(lambda: write_crash_text(report, _log_dir(config))) if report else None
        _report(crash_summary(report), path)
        return exit_codes.INTERNAL_ERROR
    if app.resume_hint:
        print(f"resume this session with: {app.resume_hint}")
    return exit_codes.OK


def _safe(write: Callable[[], Path]) -> Path | None:
    try:
        return write()
    except OSError:
        return None


def _report(cause: str, path: Path | None) -> None:
    where = f"; the traceback is in {path}" if path else ""
    print(f"m3agent crashed ({cause}){where}", file=sys.stderr)
