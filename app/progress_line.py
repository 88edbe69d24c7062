"""Progress events on stderr for `m3agent run` while the session opens.

On a terminal, snapshot, model-load and prefill progress is one line rewritten in place
(carriage return + erase to the end of the line, cut to the terminal's width so it never wraps)
and left standing by the step's final report. When stderr is not a terminal (a log, a pipe, CI)
a slow snapshot or prefill gets a plain line every few seconds and its final one; other
updates are not written at all: a file would get hundreds of lines of counters. The background
server's notices (which server is used, that it keeps running, how to stop it) are plain lines
in both cases: they say that a process outlives the run.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import TextIO

from m3agent.agent.events import Progress, ProgressStage

from .safe_text import visible

_ERASE = "\r\x1b[K"


PLAIN_AFTER_S = 1.0  # a step quicker than this prints no plain line
PLAIN_EVERY_S = 3.0


class ProgressLine:
    def __init__(
        self,
        stream: TextIO,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._out = stream
        self._tty = stream.isatty() if tty is None else tty
        self._open = False  # a progress line is on the screen without its newline
        self._clock = clock
        self._began: float | None = None  # when the current snapshot step began
        self._last_plain = float("-inf")
        self._printed = False
        self._last_prefill = float("-inf")  # when the last plain prefill line was written

    def __call__(self, p: Progress) -> None:
        text = visible(p.message)
        if p.stage == ProgressStage.SERVER:
            self._clear()
            self._out.write(f"m3agent: {text}\n")
        elif self._tty:
            width = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
            self._out.write(_ERASE + text[:width] + ("\n" if p.final else ""))
            self._open = not p.final
        elif p.stage == ProgressStage.SNAPSHOT and self._plain(p):
            self._out.write(f"m3agent: {text}\n")
        elif p.stage == ProgressStage.PREFILL and self._plain_prefill(p):
            # The agent reports only a slow prefill (agent/prefill_progress.py): the first
            # report shows at once, then one line every PLAIN_EVERY_S, and the final one.
            self._out.write(f"m3agent: {text}\n")
        else:
            return
        self._out.flush()

    def _plain(self, p: Progress) -> bool:
        """Whether this snapshot update becomes a plain line (not a terminal)."""
        now = self._clock()
        if self._began is None:
            self._began = now
        slow = now - self._began >= PLAIN_AFTER_S
        due = now - self._last_plain >= PLAIN_EVERY_S
        show = (p.final and (slow or self._printed)) or (slow and due)
        if p.final:
            self._began, self._last_plain, self._printed = None, float("-inf"), False
        elif show:
            self._last_plain, self._printed = now, True
        return show

    def _plain_prefill(self, p: Progress) -> bool:
        now = self._clock()
        show = p.final or now - self._last_prefill >= PLAIN_EVERY_S
        self._last_prefill = float("-inf") if p.final else (now if show else self._last_prefill)
        return show

    def close(self) -> None:
        """Erases a line left unfinished (a step that failed before its final report)."""
        self._clear()
        self._out.flush()

    def _clear(self) -> None:
        if self._open:
            self._out.write(_ERASE)
            self._open = False
