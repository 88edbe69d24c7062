"""What a session opens with besides the system prompt: the repository snapshot (agent/context)
and the instruction files (AGENTS.md / CLAUDE.md), as an Opening: the system messages after the
prompt, the events that say what was read, and the Session options that go with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from m3agent.agent.context import Snapshot, SnapshotConfig, build_snapshot
from m3agent.agent.context.files import FileRules
from m3agent.agent.events import ContextAction, ContextEvent, Event
from m3agent.agent.instructions import find_instructions, instructions_message_text
from m3agent.engine.api import LOCAL_ENGINES, Engine, Message
from m3agent.engine.m3.tokenizer import M3Tokenizer

from .extensions import SNAPSHOT_SKIP, host_reader
from .settings import Settings

if TYPE_CHECKING:
    from m3agent.agent.session_options import SessionOptions

    from .engine_build import Report


def _no_options() -> SessionOptions:
    return {}


@dataclass
class Opening:
    """What a session opens with: system messages after the prompt (a new session's), the
    events that say what was read, and the options that keep the snapshot fresh."""

    messages: list[Message] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    options: SessionOptions = field(default_factory=_no_options)


def snapshot_tokenizer(settings: Settings) -> M3Tokenizer:
    """The model's tokenizer when there is a model directory, else the bundled M3 one."""
    if settings.engine in LOCAL_ENGINES and settings.model:
        path = Path(settings.model).expanduser()
        if (path / "tokenizer.json").is_file():
            return M3Tokenizer.from_model_dir(path)
    return M3Tokenizer.default()


def snapshot_config(
    settings: Settings, max_context_tokens: int, budget: int | None = None
) -> SnapshotConfig | None:
    """SnapshotConfig from settings; None when the budget leaves no room for a snapshot."""
    budget = budget or settings.context_budget or max_context_tokens - settings.context_reserve
    if budget < 1:
        return None
    # Skills, commands and agent files reach the model only when used (issue 23).
    skip = (*settings.context_skip, *SNAPSHOT_SKIP)
    rules = FileRules(skip, settings.context_max_file_bytes)
    return SnapshotConfig(budget, rules, settings.home / "context-cache")


def repository_opening(
    settings: Settings, cwd: Path, engine: Engine, *, new: bool, progress: Report | None = None
) -> Opening:
    """The repository snapshot: its message and event (a new session only: a resumed one has
    its snapshot in the log), a refresher, the auto-compaction point."""
    opening = Opening()
    if not settings.context:
        return opening
    info = engine.info()
    config = snapshot_config(settings, info.max_context_tokens)
    if config is None:
        return opening
    tokenizer = snapshot_tokenizer(settings)

    def take(report: Report | None = None) -> Snapshot:
        return build_snapshot(cwd, tokenizer, config, progress=report)

    opening.options = {
        "snapshot_builder": lambda report=None: take(report).message(),
        "auto_compact_tokens": max(1, int(info.max_context_tokens * 0.9)),
    }
    if not new:
        return opening
    snap = take(progress)
    if snap.entries("included") or snap.instructions or snap.entries("listed"):
        detail = {"files": len(snap.entries("included")), **snap.summary()}
        opening.messages.append(snap.message())
        opening.events.append(ContextEvent(action=ContextAction.SNAPSHOT, detail=detail))
    return opening


def add_instructions(opening: Opening, settings: Settings, cwd: Path) -> None:
    """The user's and the parent directories' AGENTS.md / CLAUDE.md and their @imports, one
    system message after the snapshot (agent/instructions.py), read under the host read
    policy. `--no-context` (settings.context off): none of them is read."""
    if not settings.context:
        return
    files = find_instructions(cwd, settings.user_instructions_file, host_reader(settings, cwd))
    if not files:
        return
    opening.messages.append(Message(role="system", content=instructions_message_text(files)))
    opening.events.append(
        ContextEvent(
            action=ContextAction.INSTRUCTIONS,
            detail={"files": [f"{f.scope}: {f.path}" for f in files]},
        )
    )
