"""Crash logs: the traceback goes to a file, the user gets one line naming it."""

from __future__ import annotations

import datetime as _dt
import os
import traceback
from pathlib import Path


def write_crash_log(error: BaseException, log_dir: Path) -> Path:
    """Writes the traceback under log_dir and returns the file's path."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S")
    path = log_dir / f"crash-{stamp}-{os.getpid()}.log"
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    path.write_text(text, encoding="utf-8")
    return path
