"""Crash logs: the traceback goes to a private file, the user gets one line naming it."""

from __future__ import annotations

import datetime as _dt
import os
import re
import traceback
from pathlib import Path

from m3agent.tools.private_fs import private_dir, write_private

_LAST_LINE = re.compile(r"^([A-Za-z_][\w.]*): (.*)$")


def write_crash_text(text: str, log_dir: Path) -> Path:
    """Writes a crash report under log_dir (0600: locals may hold secrets); returns its path."""
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S")
    path = private_dir(log_dir) / f"crash-{stamp}-{os.getpid()}.log"
    write_private(path, text)
    return path


def write_crash_log(error: BaseException, log_dir: Path) -> Path:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return write_crash_text(text, log_dir)


def crash_summary(report: str) -> str:
    """`RuntimeError: boom` from a traceback's text (its last `Type: message` line)."""
    for line in reversed(report.splitlines()):
        match = _LAST_LINE.match(line.strip())
        if match:
            return f"{match.group(1)}: {match.group(2).strip()}"
    return "unexpected error"
