"""The conversation: append-only messages, mirrored to a JSONL session log.

One line per message or event, written and fsynced before the loop takes its next step, so a
crash loses at most the step in flight. Line kinds (all carry "kind"):
  {"kind": "session", "v": 1, "id", "created", "cwd", "engine", "model", "thinking_default"}
  {"kind": "message", "message": Message.to_dict()}
  {"kind": "event", "event": Event.to_dict()}         (not the streaming text deltas)
  {"kind": "setting", "thinking_default": MODE}        (the mode of later turns)
  {"kind": "setting", "session_thinking_mode": MODE}   (the mode in the prompt's system block)
  {"kind": "compaction", "keep": N, "messages": [Message.to_dict(), ...]}
      (the first N messages stay, the rest is replaced by `messages`: /compact, a fresh snapshot)
  {"kind": "rewind", "keep": N, ...}                  (the first N messages stay: /rewind; the
      dropped messages stay in the log above it, so nothing is ever lost)
`Conversation.load` rebuilds the exact message list from the message lines, after cutting off a
torn last line (backed up, reported in `repairs`: agent/log_repair.py). A new log's header line
is written aside and linked into place, so a log is never without one.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from m3agent.engine.api import Message
from m3agent.tools.private_fs import fix_mode, open_private, private_dir

from .log_repair import LogInUse, close_unanswered, cut_torn_tail

LOG_VERSION = 1


class SessionLogError(Exception):
    """The session log is missing or unreadable; the message names the file."""


def new_session_id() -> str:
    # Sortable by time, unique enough for one user's machine.
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def session_log_path(sessions_dir: Path, session_id: str) -> Path:
    if not session_id or "/" in session_id or session_id.startswith("."):
        raise SessionLogError(f"invalid session id {session_id!r}")
    return sessions_dir / f"{session_id}.jsonl"


@dataclass(frozen=True, slots=True)
class SessionMeta:
    id: str
    created: str
    cwd: str
    engine: str = ""
    model: str = ""
    thinking_default: str = "adaptive"
    # The mode written in the prompt's system block: the starting default unless changed.
    session_thinking_mode: str = "adaptive"
    forked_from: str = ""  # /fork: the session whose conversation this one started from


class Conversation:
    """Messages in order plus the open log. Only appends; earlier turns are never rewritten."""

    def __init__(self, meta: SessionMeta, path: Path, messages: list[Message] | None = None):
        self.meta = meta
        self.path = path
        self._messages: list[Message] = list(messages or [])
        self._file: TextIO | None = None
        self.repairs: list[str] = []  # what load had to mend (a torn last line), for the user

    # ---- construction ---------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        sessions_dir: Path,
        *,
        cwd: str,
        engine: str = "",
        model: str = "",
        thinking_default: str = "adaptive",
        session_id: str | None = None,
        forked_from: str = "",
    ) -> Conversation:
        private_dir(sessions_dir)
        sid = session_id or new_session_id()
        meta = SessionMeta(
            id=sid,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            cwd=cwd,
            engine=engine,
            model=model,
            thinking_default=thinking_default,
            session_thinking_mode=thinking_default,  # the session starts in its default mode
            forked_from=forked_from,
        )
        path = session_log_path(sessions_dir, sid)
        if path.exists():
            raise SessionLogError(f"session log {path} already exists")
        # The header appears whole or not at all (written aside, then linked into place): a
        # crash at any point never leaves a log that cannot be loaded.
        header = (
            json.dumps(
                {"kind": "session", "v": LOG_VERSION, **_meta_dict(meta)}, ensure_ascii=False
            )
            + "\n"
        )
        tmp = sessions_dir / f".{sid}.{os.getpid()}.new"
        with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as f:
            f.write(header)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise SessionLogError(f"session log {path} already exists") from None
        finally:
            tmp.unlink(missing_ok=True)
        return cls(meta, path)

    @classmethod
    def load(cls, sessions_dir: Path, session_id: str, *, repair: bool = True) -> Conversation:
        """The conversation in the log. repair=False only reads (a torn last line is skipped,
        not cut): for a look at the header before resuming."""
        path = session_log_path(sessions_dir, session_id)
        if not path.exists():
            raise SessionLogError(f"no session {session_id!r} (looked for {path})")
        private_dir(sessions_dir)  # an older version left them world-readable
        fix_mode(path)
        try:
            mended = cut_torn_tail(path) if repair else None
        except LogInUse as e:
            raise SessionLogError(str(e)) from None
        meta: SessionMeta | None = None
        messages: list[Message] = []
        thinking: str | None = None
        session_mode: str | None = None
        for lineno, rec in read_records(path):
            kind = rec.get("kind")
            if kind == "session":
                meta = SessionMeta(
                    id=rec["id"],
                    created=rec.get("created", ""),
                    cwd=rec.get("cwd", ""),
                    engine=rec.get("engine", ""),
                    model=rec.get("model", ""),
                    thinking_default=rec.get("thinking_default", "adaptive"),
                    session_thinking_mode=rec.get(
                        "session_thinking_mode", rec.get("thinking_default", "adaptive")
                    ),
                    forked_from=rec.get("forked_from", ""),
                )
            elif kind == "message":
                try:
                    messages.append(Message.from_dict(rec["message"]))
                except (KeyError, TypeError) as e:
                    raise SessionLogError(f"{path}:{lineno}: bad message record ({e})") from e
            elif kind == "compaction":
                try:
                    tail = [Message.from_dict(m) for m in rec["messages"]]
                    messages = messages[: int(rec["keep"])] + tail
                except (KeyError, TypeError, ValueError) as e:
                    raise SessionLogError(f"{path}:{lineno}: bad compaction record ({e})") from e
            elif kind == "rewind":
                try:
                    messages = messages[: int(rec["keep"])]
                except (KeyError, TypeError, ValueError) as e:
                    raise SessionLogError(f"{path}:{lineno}: bad rewind record ({e})") from e
            elif kind == "setting" and "thinking_default" in rec:
                thinking = rec["thinking_default"]
            if kind == "setting" and "session_thinking_mode" in rec:
                session_mode = rec["session_thinking_mode"]
        if meta is None:
            raise SessionLogError(f"{path}: no session header line")
        if thinking is not None:
            meta = replace(meta, thinking_default=thinking)
        if session_mode is not None:
            meta = replace(meta, session_thinking_mode=session_mode)
        conv = cls(meta, path, messages)
        conv.repairs = [mended] if mended else []
        return conv

    def fork(self, sessions_dir: Path) -> Conversation:
        """/fork: a new session whose log starts with this one's messages and modes, so its
        next prompt begins with this one's, token for token, and the engine's prefix cache
        serves it. The last request's usage goes along (what a warm engine still holds)."""
        meta = self.meta
        conv = Conversation.create(
            sessions_dir,
            cwd=meta.cwd,
            engine=meta.engine,
            model=meta.model,
            thinking_default=meta.thinking_default,
            forked_from=meta.id,
        )
        if meta.session_thinking_mode != meta.thinking_default:
            conv.log_setting(session_thinking_mode=meta.session_thinking_mode)
            conv.meta = replace(conv.meta, session_thinking_mode=meta.session_thinking_mode)
        for m in self._messages:
            conv.append(m)
        last = self._last_usage_event()
        if last is not None:
            conv.log_event(last)
        return conv

    def _last_usage_event(self) -> dict[str, Any] | None:
        last = None
        try:
            for _, rec in read_records(self.path):
                event = rec.get("event")
                if isinstance(event, dict) and event.get("type") == "model_request_finished":
                    last = event
        except (OSError, SessionLogError):
            return None
        return last

    # ---- reading ----------------------------------------------------------------------------

    def last_sequence_tokens(self) -> int | None:
        """Prompt + generated tokens of the log's last engine request (its usage event), or
        None: what a warm engine can still hold of this session after a resume."""
        last = None
        try:
            with self.path.open("rb") as f:
                for line in f:
                    if b'"model_request_finished"' not in line:
                        continue
                    try:
                        usage = json.loads(line)["event"]["usage"]
                        last = int(usage["prompt_tokens"]) + int(usage["generated_tokens"])
                    except (ValueError, KeyError, TypeError):
                        continue
        except OSError:
            return None
        return last

    @property
    def id(self) -> str:
        return self.meta.id

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)

    def __len__(self) -> int:
        return len(self._messages)

    # ---- writing ----------------------------------------------------------------------------

    def append(self, message: Message, *, is_error: bool | None = None) -> None:
        """Log first, then remember: what the model later sees is always on disk. A tool
        message's record also says whether the call failed (is_error), beside the message:
        log readers need not match it with its tool_call_finished event."""
        record: dict[str, Any] = {"kind": "message", "message": message.to_dict()}
        if is_error is not None:
            record["is_error"] = is_error
        self._write(record)
        self._messages.append(message)

    def replace_tail(self, keep: int, messages: list[Message]) -> None:
        """Compaction: keep the first `keep` messages, replace the rest. The one exception to
        append-only, logged as its own record so that `load` rebuilds the same list."""
        if not 0 <= keep <= len(self._messages):
            raise ValueError(f"cannot keep {keep} of {len(self._messages)} messages")
        self._write(
            {"kind": "compaction", "keep": keep, "messages": [m.to_dict() for m in messages]}
        )
        self._messages = self._messages[:keep] + list(messages)

    def rewind(self, keep: int, **detail: object) -> None:
        """/rewind: back to the first `keep` messages. Appended as a record (the log is never
        cut), so `load` rebuilds the shorter list and the dropped turns stay readable."""
        if not 0 < keep <= len(self._messages):
            raise ValueError(f"cannot rewind to {keep} of {len(self._messages)} messages")
        self._write({"kind": "rewind", "keep": keep, **detail})
        self._messages = self._messages[:keep]

    def close_unanswered_calls(self) -> list[str]:
        """Give every tool call that has no result an "interrupted" result, right after its
        assistant message (a crash mid-tool leaves one); the ids closed. Logged like any
        message (or, for a call before the last message, as a compaction record)."""
        fix = close_unanswered(list(self._messages))
        if fix is None:
            return []
        keep, tail, closed = fix
        if keep == len(self._messages):
            for m in tail:
                self.append(m)
        else:
            self.replace_tail(keep, tail)
        return closed

    def log_event(self, event_dict: dict[str, Any]) -> None:
        self._write({"kind": "event", "event": event_dict})

    def log_setting(self, **values: object) -> None:
        self._write({"kind": "setting", **values})

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        if self._file is None:
            private_dir(self.path.parent)
            fd = open_private(self.path, os.O_WRONLY | os.O_APPEND)
            fcntl.flock(fd, fcntl.LOCK_SH)  # a repair (log_repair.py) waits for no live writer
            self._file = open(fd, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        self._file.write(line)
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _meta_dict(meta: SessionMeta) -> dict[str, Any]:
    return {
        "id": meta.id,
        "created": meta.created,
        "cwd": meta.cwd,
        "engine": meta.engine,
        "model": meta.model,
        "thinking_default": meta.thinking_default,
        "session_thinking_mode": meta.session_thinking_mode,
        **({"forked_from": meta.forked_from} if meta.forked_from else {}),
    }


def read_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each line. Read as bytes and decoded line by line: a power cut
    can tear the last line mid-way through a multi-byte character, and decoding the whole file
    as text would fail on it before the torn line is recognised as one."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                # A torn last line (crash mid-write) is dropped; a torn middle line is an error.
                if f.read().strip():
                    why = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8"
                    raise SessionLogError(f"{path}:{lineno}: not JSON ({why})") from e
                return
            if not isinstance(rec, dict):
                raise SessionLogError(f"{path}:{lineno}: not a JSON object")
            yield lineno, rec
