"""The saved sessions of a sessions folder: a summary of each (read from the head of its log),
newest first, and the one `--continue` / `resume --last` picks for a workspace."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .conversation import SessionLogError, read_records, session_log_path


@dataclass(frozen=True, slots=True)
class SessionSummary:
    id: str
    created: str
    cwd: str
    first_prompt: str
    messages: int
    forked_from: str = ""


def list_sessions(sessions_dir: Path) -> list[SessionSummary]:
    """Newest first. Reads each log only up to its first user message plus a message count."""
    out: list[SessionSummary] = []
    if not sessions_dir.is_dir():
        return out
    for path in sessions_dir.glob("*.jsonl"):
        header: dict[str, Any] | None = None
        first = ""
        count = 0
        try:
            for _, rec in read_records(path):
                if rec.get("kind") == "session":
                    header = rec
                elif rec.get("kind") == "message":
                    count += 1
                    msg = rec.get("message", {})
                    if not first and msg.get("role") == "user":
                        first = msg.get("content", "")
        except (OSError, SessionLogError):
            continue  # one unreadable log must not hide the others
        if header is None:
            continue
        out.append(
            SessionSummary(
                id=header.get("id", path.stem),
                created=header.get("created", ""),
                cwd=header.get("cwd", ""),
                first_prompt=first,
                messages=count,
                forked_from=header.get("forked_from", ""),
            )
        )
    out.sort(key=lambda s: (s.created, s.id), reverse=True)
    return out


def latest_session_id(sessions_dir: Path, cwd: str | Path) -> str | None:
    """The session last written to whose workspace is `cwd` and that has a prompt, or None
    (`--continue`, `m3agent resume --last`)."""
    where = str(Path(cwd).expanduser().resolve())
    found = [s for s in list_sessions(sessions_dir) if s.cwd == where and s.first_prompt.strip()]

    def last_write(s: SessionSummary) -> float:
        try:
            return session_log_path(sessions_dir, s.id).stat().st_mtime
        except OSError:
            return 0.0

    return max(found, key=last_write).id if found else None
