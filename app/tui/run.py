"""Runs the app in the real terminal: exit code, and the crash log's path on a crash."""

from __future__ import annotations

import sys
from pathlib import Path

from m3agent.app import exit_codes
from m3agent.app.tui.app import _log_dir, create_app
from m3agent.app.tui.crash import write_crash_log
from m3agent.app.tui.ports import SessionFactory, TuiConfig


def run_tui(session_factory: SessionFactory, config: TuiConfig, *, headless: bool = False) -> int:
    app = create_app(session_factory, config)
    try:
        app.run(headless=headless)
    except Exception as e:  # outside Textual's own handler (driver start-up, teardown)
        path = _safe_log(e, _log_dir(config))
        _report(e, path)
        return exit_codes.INTERNAL_ERROR
    if app.crash_log is not None or app.return_code not in (0, None):
        # Textual has already restored the terminal (and printed the traceback).
        error = getattr(app, "_exception", None)
        _report(error, app.crash_log)
        return exit_codes.INTERNAL_ERROR
    return exit_codes.OK


def _safe_log(error: BaseException, log_dir: Path) -> Path | None:
    try:
        return write_crash_log(error, log_dir)
    except OSError:
        return None


def _report(error: BaseException | None, path: Path | None) -> None:
    cause = f"{type(error).__name__}: {error}" if error is not None else "unexpected error"
    where = f"; the traceback is in {path}" if path else ""
    print(f"m3agent crashed ({cause}){where}", file=sys.stderr)
