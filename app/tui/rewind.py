"""/rewind (and Esc-Esc): back to before an earlier prompt, the conversation and the files.

The turns to offer and the checkpoint that holds each turn's files are read from the session
log: a prompt is the user message a `turn_started` event follows; a `checkpoint` context event
is taken before the first change of its turn (an edit, a write, a shell command), so the files
as they were before prompt i are in the first checkpoint logged after it. Compaction and rewind
records cut what lies behind them, as `Conversation.load` does. No widgets here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.tools.checkpoint import Checkpoints

if TYPE_CHECKING:
    from m3agent.engine.api import Message

    from .ports import SessionLike


@dataclass(frozen=True, slots=True)
class RewindPoint:
    index: int  # the prompt's position in the conversation: a rewind keeps messages[:index]
    turn: int  # 1 for the first prompt still in the conversation
    text: str  # the prompt as sent
    checkpoint: str | None  # the files before this prompt (None: no change since)


def _records(path: Path) -> Iterator[dict[str, Any]]:
    try:
        raw = path.read_bytes()
    except OSError:
        return
    for line in raw.splitlines():
        try:
            rec = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue  # a torn last line: load cuts it too
        if isinstance(rec, dict):
            yield rec


def rewind_points(log_path: Path, messages: Sequence[Message]) -> list[RewindPoint]:
    """The prompts of the current conversation, oldest first, each with its checkpoint."""
    n = 0
    last_user: int | None = None
    prompts: list[int] = []
    checkpoints: list[tuple[int, str]] = []  # (messages logged before it, id)
    for rec in _records(Path(log_path)):
        kind = rec.get("kind")
        if kind == "message":
            if (rec.get("message") or {}).get("role") == "user":
                last_user = n
            n += 1
        elif kind == "event":
            event = rec.get("event") or {}
            if event.get("type") == "turn_started" and last_user == n - 1:
                prompts.append(last_user)
            elif event.get("type") == "context" and event.get("action") == "checkpoint":
                cid = (event.get("detail") or {}).get("id")
                if isinstance(cid, str) and cid:
                    checkpoints.append((n, cid))
        elif kind in ("compaction", "rewind"):
            try:
                keep = int(rec["keep"])
                tail = len(rec.get("messages") or ())
            except (KeyError, TypeError, ValueError):
                continue
            prompts = [i for i in prompts if i < keep]
            checkpoints = [c for c in checkpoints if c[0] <= keep]
            n, last_user = keep + tail, None
    points = []
    for turn, index in enumerate(
        (i for i in prompts if i < len(messages) and messages[i].role == "user"), 1
    ):
        after = next((cid for pos, cid in checkpoints if pos > index), None)
        points.append(RewindPoint(index, turn, messages[index].content, after))
    return points


def checkpoint_store(session: SessionLike) -> Checkpoints | None:
    """The session's Checkpoints (the store it snapshots to), or None: none, or another kind."""
    store = session.checkpoints
    return store if isinstance(store, Checkpoints) else None


def restore_files(store: Checkpoints | None, point: RewindPoint) -> str:
    """Files back to how they were before the prompt; what happened, in one line."""
    if point.checkpoint is None:
        return "files: no change was made since that prompt"
    if store is None:
        return "files: not restored (no checkpoint store in this session)"
    if point.checkpoint not in {c.id for c in store.list()}:
        # restore() drops a checkpoint and every newer one: /undo went back past it already.
        return "files: already restored to before that prompt (by /undo)"
    removed = store.restore(point.checkpoint)
    extra = f", {len(removed)} new file(s) removed" if removed else ""
    return f"files: restored to before that prompt{extra}"


# A block sent ahead of the typed prompt (`!cmd` output: <shell_command>…</shell_command>).
_LEADING_BLOCK = re.compile(r"\A\s*<([a-z_]+)>.*?</\1>\s*", re.DOTALL)


def first_line(text: str, width: int = 70) -> str:
    """The prompt's label: its first line as the user typed it, after the context blocks
    sent ahead of it (the block's own first line when the prompt is nothing else)."""
    typed = text
    while (m := _LEADING_BLOCK.match(typed)) is not None:
        typed = typed[m.end() :]
    lines = [s for s in typed.splitlines() if s.strip()]
    if not lines:  # only blocks: the first line inside the first one
        lines = [s for s in text.splitlines() if s.strip() and not s.strip().startswith("<")]
    line = lines[0] if lines else ""
    return line if len(line) <= width else line[: width - 1] + "…"
