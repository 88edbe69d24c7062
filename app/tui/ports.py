"""What the TUI needs from the layers below, as narrow protocols.

The TUI never builds an engine or a session itself: the CLI (and the tests) hand it a
`SessionFactory`, so the same app runs over the scripted engine in tests and a GPU engine
in real use.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from m3agent.agent.ops import ApprovalDecision
from m3agent.engine.api import ThinkingMode

from ..mcp.reload import ToolsetHolder

if TYPE_CHECKING:
    from m3agent.agent import events as ev
    from m3agent.agent.approvals import ApprovalGate
    from m3agent.agent.conversation import Conversation
    from m3agent.agent.ops import Op
    from m3agent.agent.turn_state import CheckpointStore
    from m3agent.engine.api import Engine, Message
    from m3agent.tools.sandbox.policy import SandboxLayer

    from ..status_line import StatusLineCommand
    from .onboarding import SetupChoice

# progress(label, fraction or None) is called from the loading thread while the engine loads.
Progress = Callable[[str, float | None], None]


class SessionLike(ToolsetHolder, Protocol):
    """The slice of agent.session.Session the TUI uses: ops in, events out; its id, log and
    messages (resume, /rewind), approval gate (modes, rules), workspace and sandbox (`!cmd`),
    checkpoints (/undo, /rewind), engine (the status bar, closing it on exit) and tools (/mcp,
    ToolsetHolder's part)."""

    resumed: bool
    gate: ApprovalGate
    conversation: Conversation
    checkpoints: CheckpointStore | None  # a Checkpoints for /undo and /rewind (rewind.py)
    engine: Engine

    @property
    def id(self) -> str: ...

    @property
    def messages(self) -> tuple[Message, ...]: ...

    def submit(self, op: Op) -> None: ...

    def events(self) -> AsyncIterator[ev.Event]: ...

    def rewind(self, keep: int, detail: dict[str, Any] | None = None) -> None: ...

    def model_writable(self) -> tuple[Path, ...]: ...

    async def close(self) -> None: ...


# session_factory(resume_id, progress) -> a started Session (or an awaitable of one). It may
# block (loading weights): the app calls it in a worker thread so the window stays responsive.
SessionFactory = Callable[[str | None, Progress], SessionLike | Awaitable[SessionLike]]


@dataclass(frozen=True, slots=True)
class SetupPort:
    """What the onboarding screen (app/tui/onboarding.py) may do; built by launch.py over the
    real settings."""

    # (url, the key typed on the screen or None) -> SetupChoice, ValueError (KeyNeeded)
    probe: Callable[[str, str | None], SetupChoice]
    check_dir: Callable[[str], SetupChoice]  # (path) -> SetupChoice, ValueError
    servers: Callable[[], list[SetupChoice]]
    # (choice) -> (SessionFactory, one line saying what was saved)
    complete: Callable[[SetupChoice], tuple[SessionFactory, str]]


# What the onboarding screen returns: complete()'s two, and the choice (the status bar names
# its engine while it loads).
SetupResult = tuple[SessionFactory, str, "SetupChoice"]


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    """What the approval modal returns: the decision for the session (an accepted command
    prefix is Decision.APPROVE_PREFIX or APPROVE_PREFIX_ALWAYS: the gate keeps it)."""

    decision: ApprovalDecision


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One row of the /sessions browser: a saved session as listed there (its first prompt
    as the title). Built from agent.session_index.SessionSummary, the log's own summary."""

    session_id: str
    title: str
    turns: int = 0
    updated: str = ""


@dataclass(frozen=True, slots=True)
class TuiConfig:
    """Everything the app shows or needs that is known before the engine has loaded."""

    cwd: Path
    engine: str = "scripted"
    model: str = ""
    thinking: ThinkingMode = ThinkingMode.ADAPTIVE
    approval: str = "on-request"
    sandbox: str = "workspace-write"
    sandbox_layers: tuple[SandboxLayer, ...] = ()
    resume: str | None = None
    state_dir: Path | None = None  # where crash logs and checkpoints live ($M3AGENT_HOME)
    max_context_tokens: int | None = None
    # False with --no-context: no instruction file is read, /memory included.
    instructions: bool = True
    # Optional services; a missing one makes its slash command say "not available".
    list_sessions: Callable[[], list[SessionRow]] | None = None
    context_report: Callable[[], str] | None = None
    undo: Callable[[], str] | None = None  # default: the session's own checkpoints
    # Called in the loading thread with the new session: the sandbox layers really active.
    probe_sandbox: Callable[[SessionLike], tuple[SandboxLayer, ...]] | None = None
    clock: Callable[[], float] = time.monotonic  # the turn timer (tests pin it)
    # First run (app/tui/onboarding.py): nothing configured, so ask for an engine first.
    setup: SetupPort | None = None
    # Notifications (app/notify.py): the resolved method, and where the bytes go.
    notify: str = "off"
    notify_write: Callable[[str], None] | None = None
    # Why /attach must refuse media for this model (a text-only checkpoint), else None.
    media_refusal: str | None = None
    # The user's status line command (app/status_line.py), trust applied; None: the built-in.
    status_line: StatusLineCommand | None = None
    start_notes: tuple[str, ...] = ()  # shown under the welcome line (an untrusted command)
    # --inline: drawn below the shell's prompt, not on the alternate screen (app/tui/run.py)
    inline: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.thinking not in ("enabled", "disabled", "adaptive"):
            raise ValueError(
                f"thinking mode must be enabled, disabled or adaptive, not {self.thinking!r}"
            )
