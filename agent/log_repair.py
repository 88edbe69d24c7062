"""Repairs a crash can make necessary before a session log is resumed.

- **A torn last line** (the process died mid-write): appending after it would glue the next
  record onto the torn bytes and make the log unreadable for good. `cut_torn_tail` copies the
  torn bytes to `<log>.torn-N` (0600), truncates the log to its last whole line and says so.
- **Tool calls without a result** (killed while a tool ran): an OpenAI-style server rejects a
  history where an assistant's tool call is not answered before the next message.
  `close_unanswered` gives each such call an "interrupted" tool result, in place.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from m3agent.engine.api import Message
from m3agent.tools.private_fs import open_private

INTERRUPTED = (
    "[interrupted: m3agent stopped before this tool call finished, so it has no "
    "result; it may have run in part. Check the workspace before repeating it.]"
)


class LogInUse(Exception):
    """Another process has the log open for writing; the message names it."""


def _is_record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, UnicodeDecodeError):
        return False


def cut_torn_tail(path: Path) -> str | None:
    """Cut a torn last line off the log (backing it up); a one-line report, or None."""
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        return None
    whole = data.endswith(b"\n")
    start = data.rfind(b"\n", 0, len(data) - 1 if whole else len(data)) + 1
    last = data[start:]  # the last line, with its newline when it has one
    if whole and _is_record(last):
        return None
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        try:  # a live writer holds a shared lock: never cut what may still be written
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LogInUse(f"{path} is being written by another m3agent process") from None
        if _is_record(last):  # whole but for its newline: finish it
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, b"\n")
            os.fsync(fd)
            return None
        n = 1
        while os.path.lexists(f"{path}.torn-{n}"):
            n += 1
        backup = Path(f"{path}.torn-{n}")
        with os.fdopen(open_private(backup, os.O_WRONLY | os.O_EXCL), "wb") as b:
            b.write(last)
            b.flush()
            os.fsync(b.fileno())
        os.ftruncate(fd, start)
        os.fsync(fd)
    finally:
        os.close(fd)
    return (
        f"the session log ended in a torn line ({len(last)} bytes, from a crash mid-write); "
        f"cut off, kept in {backup.name}"
    )


def close_unanswered(messages: list[Message]) -> tuple[int, list[Message], list[str]] | None:
    """(keep, new tail, call ids closed) so that messages[:keep] + tail answers every tool
    call right after its assistant message; None when nothing is missing."""
    out: list[Message] = []
    first_change: int | None = None
    closed: list[str] = []
    pending: dict[str, str] = {}

    def close_pending() -> None:
        nonlocal first_change
        if first_change is None:
            first_change = len(out)
        for cid, name in pending.items():
            out.append(Message(role="tool", content=INTERRUPTED, tool_call_id=cid, name=name))
            closed.append(cid)
        pending.clear()

    for m in messages:
        if pending and not (m.role == "tool" and m.tool_call_id in pending):
            close_pending()
        out.append(m)
        if m.role == "assistant" and m.tool_calls:
            pending = {c.id: c.name for c in m.tool_calls}
        elif m.role == "tool":
            pending.pop(m.tool_call_id or "", None)
    if pending:
        close_pending()
    if first_change is None:
        return None
    return first_change, out[first_change:], closed
